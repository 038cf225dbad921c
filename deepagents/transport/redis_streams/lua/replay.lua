-- Put a dead-lettered task back on a tier stream with a fresh delivery count.
-- KEYS[1] dlq stream, KEYS[2] target stream, KEYS[3] task hash, KEYS[4] its step records
-- (kept: the replayed task resumes past its completed steps)
-- ARGV[1] dlq entry id, [2] task json, [3] now ms, [4] reply channel
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return {'missing', ''} end
local id = redis.call('XADD', KEYS[2], '*', 'task', ARGV[2], 'attempt', '1', 'enq', ARGV[3],
                      'reply', ARGV[4])
redis.call('HDEL', KEYS[3], 'result', 'owner', 'finished_ms', 'due_ms', 'first_ms',
           'spent_tokens', 'spent_cost')
redis.call('HSET', KEYS[3], 'state', 'queued', 'entry', id, 'enq_ms', ARGV[3], 'deliveries', 0)
redis.call('PERSIST', KEYS[3])
redis.call('PERSIST', KEYS[4])
redis.call('XDEL', KEYS[1], ARGV[1])
return {'ok', id}
