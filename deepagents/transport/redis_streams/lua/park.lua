-- Park a delivery that asked a person a question: the task becomes 'waiting' and holds no
-- entry and no worker slot. Owner-checked like commit: a worker that lost its entry cannot
-- park it. The wait's deadline goes into the delayed set (member 'w:<task id>'), the task
-- into the shard's waiting index (score = asked at), all with the ack and delete.
-- KEYS[1] stream, KEYS[2] task hash, KEYS[3] delayed set, KEYS[4] waiting index,
-- KEYS[5] outbox stream, KEYS[6] the question's record (string)
-- ARGV[1] group, [2] consumer, [3] entry id, [4] task id, [5] the record: the task json,
-- a newline, then the question as json (JSON text holds no raw newline), [6] tier,
-- [7] ask name, [8] on_timeout, [9] now ms, [10] due ms, [11] events json
-- Returns ok | dup (already done: acked and deleted) | lost (not ours)
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 'lost' end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if redis.call('HGET', KEYS[2], 'state') == 'done' then return 'dup' end
-- deliveries back to 0: this run ended in an outcome, so the resumed run is not taken for
-- one whose earlier deliveries died (the quarantine's count)
redis.call('HSET', KEYS[2], 'state', 'waiting', 'tier', ARGV[6], 'ask', ARGV[7],
           'on_timeout', ARGV[8], 'asked_ms', ARGV[9], 'wait_due_ms', ARGV[10], 'deliveries', 0)
redis.call('SET', KEYS[6], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[10], 'w:' .. ARGV[4])
redis.call('ZADD', KEYS[4], ARGV[9], ARGV[4])
if ARGV[11] ~= '' then redis.call('XADD', KEYS[5], '*', 'events', ARGV[11]) end
return 'ok'
