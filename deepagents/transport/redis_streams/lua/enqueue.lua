-- Enqueue a batch of tasks of one shard, each unless its task hash already exists
-- (idempotent on task_id), each with its location record when one is given.
-- KEYS[1] outbox stream, then per task: tier stream, task hash[, location key]
-- ARGV[1] now ms, [2] location TTL s ('' = no location keys: the caller wrote them, or
-- they live on other nodes of a cluster), then per task: task json, reply channel,
-- max backlog, tier, outbox events (a JSON array; '' = outbox off)[, location value]
-- Returns per task {status, entry id}: ok | exists (entry of the first enqueue) | overloaded
-- On one server the location key may sit in another hash slot than the shard: written in
-- the same script as the entry, an enqueued task never lacks its location record.
local now, ttl = ARGV[1], ARGV[2]
local located = ttl ~= ''
local kstride, astride = located and 3 or 2, located and 6 or 5
local out, events = {}, {}
for i = 0, (#KEYS - 1) / kstride - 1 do
  local stream, hash = KEYS[2 + i * kstride], KEYS[3 + i * kstride]
  local a = 3 + i * astride
  if redis.call('EXISTS', hash) == 1 then
    out[#out + 1] = {'exists', redis.call('HGET', hash, 'entry') or ''}
  elseif redis.call('XLEN', stream) >= tonumber(ARGV[a + 2]) then
    out[#out + 1] = {'overloaded', ''}
  else
    local reply = ARGV[a + 1]
    local id = redis.call('XADD', stream, '*', 'task', ARGV[a], 'attempt', 1, 'enq', now,
                          'reply', reply)
    redis.call('HSET', hash, 'state', 'queued', 'entry', id, 'tier', ARGV[a + 3],
               'reply', reply, 'enq_ms', now, 'deliveries', 0)
    if located then
      redis.call('SET', KEYS[4 + i * kstride], ARGV[a + 5], 'EX', ttl)
    end
    local ev = ARGV[a + 4]
    if ev ~= '' then events[#events + 1] = string.sub(ev, 2, -2) end  -- the array's items
    out[#out + 1] = {'ok', id}
  end
end
if #events > 0 then
  redis.call('XADD', KEYS[1], '*', 'events', '[' .. table.concat(events, ',') .. ']')
end
return out
