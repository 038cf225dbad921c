-- A person's answer to a waiting task's question: checked, stored and the task re-enqueued
-- on its tier in one step, so two replies can never both resume it, a reply racing the
-- wait's timeout or a cancel either wins whole or changes nothing, and an answer stored is
-- never left without the delivery that reads it.
-- KEYS[1] task hash, KEYS[2] steps hash, KEYS[3] delayed set, KEYS[4] waiting index,
-- KEYS[5] outbox stream, KEYS[6] the question's record, KEYS[7..] tier streams
-- ARGV[1] task id, [2] ask name (the question the answer was validated for), [3] answer
-- json, [4] now ms, [5] events json, [6..] tier names (in KEYS order, from KEYS[7])
-- Returns {status, state, asked ms}: ok | missing | already_replied | not_waiting
local h = redis.call('HMGET', KEYS[1], 'state', 'ask', 'tier', 'reply', 'attempt', 'asked_ms')
if not h[1] then return {'missing', '', 0} end
if h[1] ~= 'waiting' or h[2] ~= ARGV[2] then
  if ARGV[2] ~= '' and redis.call('HEXISTS', KEYS[2], 'ask:' .. ARGV[2]) == 1 then
    return {'already_replied', h[1], 0}
  end
  return {'not_waiting', h[1], 0}
end
local record = redis.call('GET', KEYS[6]) or ''
local task = string.sub(record, 1, (string.find(record, '\n', 1, true) or 0) - 1)
local k = #KEYS
for i = 7, #KEYS do
  if ARGV[i - 1] == h[3] then k = i end
end
redis.call('HSET', KEYS[2], 'ask:' .. ARGV[2], ARGV[3])
redis.call('ZREM', KEYS[3], 'w:' .. ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[6])
local id = redis.call('XADD', KEYS[k], '*', 'task', task, 'attempt', h[5] or '1',
                      'enq', ARGV[4], 'reply', h[4] or '')
redis.call('HSET', KEYS[1], 'state', 'queued', 'entry', id, 'enq_ms', ARGV[4])
redis.call('HDEL', KEYS[1], 'on_timeout', 'asked_ms', 'wait_due_ms')
if ARGV[5] ~= '' then redis.call('XADD', KEYS[5], '*', 'events', ARGV[5]) end
return {'ok', 'queued', tonumber(h[6]) or 0}
