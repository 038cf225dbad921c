-- Begin a batch of deliveries of one stream: skip duplicates, mark the rest running.
-- KEYS[1] stream, KEYS[2..n+1] task hashes (one per entry)
-- ARGV[1] group, [2] consumer, [3] now ms, then per entry: entry id, attempt
-- Returns per entry {status, deliveries}: ok | dup (already done: acked and deleted)
--   | lost (another consumer owns it now) | gone (no longer pending)
local out = {}
for i = 2, #KEYS do
  local id = ARGV[2 + (i - 1) * 2]
  local attempt = ARGV[3 + (i - 1) * 2]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p == 0 then
    out[#out + 1] = {'gone', 0}
  elseif p[1][2] ~= ARGV[2] then
    out[#out + 1] = {'lost', 0}
  elseif redis.call('HGET', KEYS[i], 'state') == 'done' then
    redis.call('XACK', KEYS[1], ARGV[1], id)
    redis.call('XDEL', KEYS[1], id)
    out[#out + 1] = {'dup', 0}
  else
    local n = redis.call('HINCRBY', KEYS[i], 'deliveries', 1)
    redis.call('HSET', KEYS[i], 'state', 'running', 'owner', ARGV[2], 'entry', id,
               'attempt', attempt, 'started_ms', ARGV[3])
    out[#out + 1] = {'ok', n}
  end
end
return out
