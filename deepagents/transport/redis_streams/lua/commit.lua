-- Commit a batch of finished tasks of one stream, each all or nothing.
-- KEYS[1] stream, KEYS[2] outbox stream, KEYS[3..n+2] task hashes, KEYS[n+3..2n+2] their
-- step records (which expire with the result)
-- ARGV[1] group, [2] consumer, [3] now ms, [4] result ttl s,
-- then per entry: entry id, result json, reply channel ('' = none), events json ('' = none)
-- Returns per entry: ok | dup (a result was already there; our entry acked) | lost (not ours).
-- Running it again after an ambiguous failure is safe: a commit of ours that already
-- landed answers ok again.
-- The acks, deletes and outbox events of the batch are written once at the end (one call
-- each rather than one per task); the script is atomic, so no one sees the difference.
local out, done, events = {}, {}, {}
local n = (#KEYS - 2) / 2
for i = 3, n + 2 do
  local base = 5 + (i - 3) * 4
  local id, result, reply, ev = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p == 0 then
    local h = redis.call('HMGET', KEYS[i], 'state', 'owner', 'entry')
    if h[1] == 'done' and h[2] == ARGV[2] and h[3] == id then
      out[#out + 1] = 'ok'
    else
      out[#out + 1] = 'lost'
    end
  elseif p[1][2] ~= ARGV[2] then
    out[#out + 1] = 'lost'
  else
    done[#done + 1] = id
    if redis.call('HGET', KEYS[i], 'state') == 'done' then
      out[#out + 1] = 'dup'
    else
      redis.call('HSET', KEYS[i], 'state', 'done', 'result', result, 'owner', ARGV[2],
                 'finished_ms', ARGV[3])
      redis.call('EXPIRE', KEYS[i], ARGV[4])
      redis.call('EXPIRE', KEYS[i + n], ARGV[4])
      -- each task's events are a JSON array: the batch's become one array
      if ev ~= '' then events[#events + 1] = string.sub(ev, 2, -2) end
      if reply ~= '' then redis.call('PUBLISH', reply, result) end
      out[#out + 1] = 'ok'
    end
  end
end
if #done > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(done))
  redis.call('XDEL', KEYS[1], unpack(done))
end
if #events > 0 then
  redis.call('XADD', KEYS[2], '*', 'events', '[' .. table.concat(events, ',') .. ']')
end
return out
