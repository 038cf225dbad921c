-- End a task whose delayed-set member was damaged: promote.lua moved the member to the
-- dead-letter stream (decode_error) and named the task it could still read, which would
-- otherwise stay 'retrying' for ever, its submitter waiting out a timeout. It ends dead
-- with the reason, once: only while it is still retrying (or scheduled).
-- KEYS[1] task hash, KEYS[2] outbox stream, KEYS[3] its step records
-- ARGV[1] result json, [2] now ms, [3] ttl s, [4] events json
-- Returns 'ok', or the state that left it alone ('missing')
local h = redis.call('HMGET', KEYS[1], 'state', 'reply')
if not h[1] then return 'missing' end
if h[1] ~= 'retrying' and h[1] ~= 'scheduled' then return h[1] end
redis.call('HSET', KEYS[1], 'state', 'dead', 'result', ARGV[1], 'finished_ms', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
if ARGV[4] ~= '' then redis.call('XADD', KEYS[2], '*', 'events', ARGV[4]) end
if h[2] and h[2] ~= '' then redis.call('PUBLISH', h[2], ARGV[1]) end
return 'ok'
