-- Park a delivery that asked a person a question: the task becomes 'waiting' and holds no
-- entry and no worker slot. Owner-checked like commit: a worker that lost its entry cannot
-- park it. The wait's deadline goes into the delayed set (member 'w:<task id>'), the task
-- into the shard's waiting index (score = asked at), all with the ack and delete.
-- KEYS[1] stream, KEYS[2] task hash, KEYS[3] delayed set, KEYS[4] waiting index,
-- KEYS[5] outbox stream, KEYS[6] the question's record (string)[, KEYS[7] the tenant's
-- waiting index, for a task with a tenant]
-- ARGV[1] group, [2] consumer, [3] entry id, [4] task id, [5] the record: the task json,
-- a newline, then the question as json (JSON text holds no raw newline), [6] tier,
-- [7] ask name, [8] on_timeout, [9] now ms, [10] due ms, [11] events json, [12] the
-- version whose streams it was read from under a rollout ('' unversioned): a reply
-- re-enqueues it there, where its wait's member is
-- Returns ok | dup (already done: acked and deleted) | lost (not ours)
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 'lost' end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if redis.call('HGET', KEYS[2], 'state') == 'done' then return 'dup' end
-- deliveries back to 0: this run ended in an outcome, so the resumed run is not taken for
-- one whose earlier deliveries died (the quarantine's count)
redis.call('HSET', KEYS[2], 'state', 'waiting', 'tier', ARGV[6], 'ask', ARGV[7],
           'on_timeout', ARGV[8], 'asked_ms', ARGV[9], 'wait_due_ms', ARGV[10], 'deliveries', 0,
           'parked_version', ARGV[12])
redis.call('SET', KEYS[6], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[10], 'w:' .. ARGV[4])
redis.call('ZADD', KEYS[4], ARGV[9], ARGV[4])
if KEYS[7] then
  -- Answer, wake and cancel take a task out of the shard's index only: its tenant's keeps
  -- the member until it is seen gone. Drop the oldest three and two others that are, so
  -- the tenant's index stays near its live size even if nobody lists it.
  local seen = redis.call('ZRANGE', KEYS[7], 0, 2)
  for _, m in ipairs(redis.call('ZRANDMEMBER', KEYS[7], 2)) do seen[#seen + 1] = m end
  for _, m in ipairs(seen) do
    if not redis.call('ZSCORE', KEYS[4], m) then redis.call('ZREM', KEYS[7], m) end
  end
  redis.call('ZADD', KEYS[7], ARGV[9], ARGV[4])
end
if ARGV[11] ~= '' then redis.call('XADD', KEYS[5], '*', 'events', ARGV[11]) end
return 'ok'
