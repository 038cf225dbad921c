-- Cancel a task that has not started (queued, scheduled, retrying), or that waits for a
-- reply: answer it cancelled. A queued task's entry is later acked as a duplicate, as is a
-- scheduled one's once promoted (its member is left for the pump: the member is the task's
-- JSON, which this script does not have); a waiting task has no entry, and its wait
-- leaves the delayed set and the waiting index here.
-- KEYS[1] task hash, KEYS[2] outbox stream, KEYS[3] its step records (a retrying or
-- waiting task may have some; they expire with the result), KEYS[4] delayed set,
-- KEYS[5] waiting index, KEYS[6] the question's record
-- ARGV[1] result json, [2] now ms, [3] ttl s, [4] events json, [5] task id, [6] '1': a
-- running task too (its worker's step records and commit then find it done and count a
-- duplicate, so it ends once, cancelled: this script or the commit, whichever runs first),
-- [7] the channel its agent's workers hear cancels on ('' = none): a running task's id is
-- published there, so the worker running it stops it at once
-- Returns 'ok', or the state that prevented it (running, done, dead, …; 'missing').
local h = redis.call('HMGET', KEYS[1], 'state', 'reply')
if not h[1] then return 'missing' end
local running = h[1] == 'running' and ARGV[6] == '1'
local cancellable = h[1] == 'queued' or h[1] == 'scheduled' or h[1] == 'retrying' or h[1] == 'waiting'
if not cancellable and not running then
  return h[1]
end
if h[1] == 'waiting' then
  redis.call('ZREM', KEYS[4], 'w:' .. ARGV[5])
  redis.call('ZREM', KEYS[5], ARGV[5])
  redis.call('DEL', KEYS[6])
  redis.call('HDEL', KEYS[1], 'on_timeout', 'asked_ms', 'wait_due_ms', 'awaiting', 'wait_mode',
             'wait_task', 'sweep_ms')
end
redis.call('HSET', KEYS[1], 'state', 'done', 'result', ARGV[1], 'finished_ms', ARGV[2],
           'cancelled', '1')
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
if ARGV[4] ~= '' then redis.call('XADD', KEYS[2], '*', 'events', ARGV[4]) end
if h[2] and h[2] ~= '' then redis.call('PUBLISH', h[2], ARGV[1]) end
if h[1] == 'running' and ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[7], ARGV[5]) end
return 'ok'
