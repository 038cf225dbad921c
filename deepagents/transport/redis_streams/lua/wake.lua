-- A waiting task's wait is due (its timeout, or its own deadline): count the timeout in the
-- steps hash and re-enqueue the task, whose ask() then applies its on_timeout policy (or
-- whose deadline ends it). The member in the delayed set is the claim: a reply, a cancel
-- and another pump each take it out, so exactly one of them acts.
-- KEYS[1] task hash, KEYS[2] steps hash, KEYS[3] delayed set, KEYS[4] waiting index,
-- KEYS[5] outbox stream, KEYS[6] the question's record, KEYS[7..] tier streams
-- ARGV[1] task id, [2] now ms, [3] events json, [4..] tier names (in KEYS order)
-- Returns {status, asked ms[, awaited children]}: ok | gone (no such member now) | stale (not
-- waiting) | sweep (a wait for children, not yet at its deadline: the member is moved on by
-- its sweep interval and the awaited child ids returned, for the worker to send again the
-- ends a crash lost; worker/delegation.py)
-- Writes start with the one that can fail on a damaged key (HINCRBY on a steps key of
-- another type): a script is not rolled back, and a wait taken out of the set before a
-- failure would leave its task waiting for ever. Until then, only reads.
local member = 'w:' .. ARGV[1]
if not redis.call('ZSCORE', KEYS[3], member) then return {'gone', 0} end
local h = redis.call('HMGET', KEYS[1], 'state', 'ask', 'tier', 'reply', 'attempt', 'asked_ms',
                     'awaiting', 'wait_due_ms', 'sweep_ms', 'wait_task')
if h[1] ~= 'waiting' then
  redis.call('ZREM', KEYS[3], member)
  return {'stale', 0}
end
local task
if h[7] then  -- it waits for its children
  local now, deadline = tonumber(ARGV[2]), tonumber(h[8]) or 0
  if deadline == 0 or now < deadline then
    local due = now + (tonumber(h[9]) or 30000)
    if deadline > 0 and deadline < due then due = deadline end
    redis.call('ZADD', KEYS[3], due, member)
    return {'sweep', 0, h[7]}
  end
  task = h[10]  -- its deadline passed: the delivery this makes fails it
  redis.call('HDEL', KEYS[1], 'awaiting', 'wait_mode', 'wait_task', 'sweep_ms')
else
  local record = redis.call('GET', KEYS[6]) or ''
  task = string.sub(record, 1, (string.find(record, '\n', 1, true) or 0) - 1)
  redis.call('HINCRBY', KEYS[2], 'ask:' .. h[2] .. ':timeouts', 1)
end
local k = #KEYS
for i = 7, #KEYS do
  if ARGV[i - 3] == h[3] then k = i end
end
redis.call('ZREM', KEYS[3], member)
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[6])
local id = redis.call('XADD', KEYS[k], '*', 'task', task, 'attempt', h[5] or '1',
                      'enq', ARGV[2], 'reply', h[4] or '')
redis.call('HSET', KEYS[1], 'state', 'queued', 'entry', id, 'enq_ms', ARGV[2])
redis.call('HDEL', KEYS[1], 'on_timeout', 'asked_ms', 'wait_due_ms')
if ARGV[3] ~= '' then redis.call('XADD', KEYS[5], '*', 'events', ARGV[3]) end
return {'ok', tonumber(h[6]) or 0}
