-- Enqueue one task unless its task hash already exists (idempotent on task_id).
-- KEYS[1] tier stream, KEYS[2] task hash, KEYS[3] outbox stream
-- ARGV[1] task json, [2] attempt, [3] now ms, [4] reply channel, [5] max backlog,
-- ARGV[6] tier, [7] outbox events json ('' = outbox off)
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {'exists', redis.call('HGET', KEYS[2], 'entry') or ''}
end
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[5]) then
  return {'overloaded', ''}
end
local id = redis.call('XADD', KEYS[1], '*', 'task', ARGV[1], 'attempt', ARGV[2],
                      'enq', ARGV[3], 'reply', ARGV[4])
redis.call('HSET', KEYS[2], 'state', 'queued', 'entry', id, 'tier', ARGV[6], 'reply', ARGV[4],
           'enq_ms', ARGV[3], 'deliveries', 0)
if ARGV[7] ~= '' then
  redis.call('XADD', KEYS[3], '*', 'events', ARGV[7])
end
return {'ok', id}
