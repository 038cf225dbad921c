-- Park a delivery that delegated to child tasks (worker/delegation.py): the parent becomes
-- 'waiting' for them and holds no entry and no worker slot, or, when a child it waits for
-- has ended meanwhile, goes straight back to its tier stream. Owner-checked like park: a
-- worker that lost its entry cannot park it. The child's end is recorded on this slot
-- (child_ended.lua) and checked here in the same script, so no end is missed between the
-- parent's last read and its park.
-- KEYS[1] stream, KEYS[2] task hash, KEYS[3] steps hash, KEYS[4] delayed set,
-- KEYS[5] outbox stream, KEYS[6] the stream to re-enqueue on (its tier's)
-- ARGV[1] group, [2] consumer, [3] entry id, [4] task id, [5] task json, [6] tier,
-- [7] mode: 'all' (wake when every awaited child ended) | 'any' (when one did), [8] now ms,
-- [9] sweep ms (how often the delayed pump checks the children again), [10] the task's
-- deadline ms (0: none), [11] events json, [12] version ('' unversioned), [13] every child
-- delegated so far (space separated), [14] the children awaited (space separated)
-- Returns ok (waiting) | ready (re-enqueued: a child it awaits ended) | dup | lost
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 'lost' end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if redis.call('HGET', KEYS[2], 'state') == 'done' then return 'dup' end
local ended, awaited = 0, 0
for id in string.gmatch(ARGV[14], '%S+') do
  awaited = awaited + 1
  if redis.call('HEXISTS', KEYS[3], 'child:' .. id) == 1 then ended = ended + 1 end
end
redis.call('HSET', KEYS[2], 'children', ARGV[13], 'deliveries', 0,
           'parked_version', ARGV[12],
           'tier', ARGV[6])
if (ARGV[7] == 'all' and ended == awaited) or (ARGV[7] == 'any' and ended > 0) then
  local h = redis.call('HMGET', KEYS[2], 'attempt', 'reply')
  local id = redis.call('XADD', KEYS[6], '*', 'task', ARGV[5], 'attempt', h[1] or '1',
                        'enq', ARGV[8], 'reply', h[2] or '')
  redis.call('HSET', KEYS[2], 'state', 'queued', 'entry', id, 'enq_ms', ARGV[8])
  if ARGV[11] ~= '' then redis.call('XADD', KEYS[5], '*', 'events', ARGV[11]) end
  return 'ready'
end
local due = tonumber(ARGV[8]) + tonumber(ARGV[9])
if tonumber(ARGV[10]) > 0 and tonumber(ARGV[10]) < due then due = tonumber(ARGV[10]) end
redis.call('HSET', KEYS[2], 'state', 'waiting', 'awaiting', ARGV[14], 'wait_mode', ARGV[7],
           'wait_task', ARGV[5], 'asked_ms', ARGV[8], 'wait_due_ms', ARGV[10],
           'sweep_ms', ARGV[9])
redis.call('ZADD', KEYS[4], due, 'w:' .. ARGV[4])
if ARGV[11] ~= '' then redis.call('XADD', KEYS[5], '*', 'events', ARGV[11]) end
return 'ok'
