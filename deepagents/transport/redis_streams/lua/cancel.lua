-- Cancel a task that has not started: answer it cancelled; a later delivery of its entry
-- finds the terminal result and is acked as a duplicate.
-- KEYS[1] task hash, KEYS[2] outbox stream, KEYS[3] its step records (a retrying task may
-- have some; they expire with the result)
-- ARGV[1] result json, [2] now ms, [3] ttl s, [4] events json
-- Returns 'ok', or the state that prevented it (running, done, dead, …; 'missing').
local h = redis.call('HMGET', KEYS[1], 'state', 'reply')
if not h[1] then return 'missing' end
if h[1] ~= 'queued' and h[1] ~= 'retrying' then return h[1] end
redis.call('HSET', KEYS[1], 'state', 'done', 'result', ARGV[1], 'finished_ms', ARGV[2],
           'cancelled', '1')
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
if ARGV[4] ~= '' then redis.call('XADD', KEYS[2], '*', 'events', ARGV[4]) end
if h[2] and h[2] ~= '' then redis.call('PUBLISH', h[2], ARGV[1]) end
return 'ok'
