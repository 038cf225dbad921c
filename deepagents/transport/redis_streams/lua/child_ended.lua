-- A child task ended: record its result in its parent's steps hash ('child:<child id>')
-- and, when the parent waits for it and it was the last (mode 'all') or any (mode 'any')
-- of the children it awaits, re-enqueue the parent. Runs on the parent's slot, which on a
-- Cluster is not the child's: the child's commit and this script are two steps, and the
-- delayed pump's sweep (wake.lua returning 'sweep') sends again what a crash between them
-- lost. The record is the claim: a second call for one child changes nothing, so the
-- parent is woken once.
-- KEYS[1] parent's task hash, KEYS[2] its steps hash, KEYS[3] delayed set,
-- KEYS[4] outbox stream, KEYS[5..] tier streams
-- ARGV[1] parent id, [2] child id, [3] the child's result json, [4] now ms,
-- [5] events json, [6..] tier names (in KEYS order, from KEYS[5])
-- Returns woke | recorded | dup (recorded before) | ended (the parent is over) | missing
local field = 'child:' .. ARGV[2]
if redis.call('HEXISTS', KEYS[2], field) == 1 then return 'dup' end
local h = redis.call('HMGET', KEYS[1], 'state', 'awaiting', 'wait_mode', 'tier', 'reply',
                     'attempt', 'wait_task')
if not h[1] then return 'missing' end
if h[1] == 'done' or h[1] == 'dead' then return 'ended' end
redis.call('HSET', KEYS[2], field, ARGV[3])
if ARGV[5] ~= '' then redis.call('XADD', KEYS[4], '*', 'events', ARGV[5]) end
if h[1] ~= 'waiting' or not h[2] then return 'recorded' end
local mine, left = false, 0
for id in string.gmatch(h[2], '%S+') do
  if id == ARGV[2] then mine = true end
  if redis.call('HEXISTS', KEYS[2], 'child:' .. id) == 0 then left = left + 1 end
end
if not mine or (h[3] == 'all' and left > 0) then return 'recorded' end
local k = #KEYS
for i = 5, #KEYS do
  if ARGV[i + 1] == h[4] then k = i end
end
redis.call('ZREM', KEYS[3], 'w:' .. ARGV[1])
local id = redis.call('XADD', KEYS[k], '*', 'task', h[7], 'attempt', h[6] or '1',
                      'enq', ARGV[4], 'reply', h[5] or '')
redis.call('HSET', KEYS[1], 'state', 'queued', 'entry', id, 'enq_ms', ARGV[4])
redis.call('HDEL', KEYS[1], 'awaiting', 'wait_mode', 'wait_task', 'asked_ms', 'wait_due_ms',
           'sweep_ms')
return 'woke'
