-- Park a delivery that asked a person a question: the task becomes 'waiting' and holds no
-- entry and no worker slot. Owner-checked like commit: a worker that lost its entry cannot
-- park it. The wait's deadline goes into the delayed set (member 'w:<task id>'), the task
-- into the shard's waiting index (score = asked at), all with the ack and delete.
-- KEYS[1] stream, KEYS[2] task hash, KEYS[3] delayed set, KEYS[4] waiting index,
-- KEYS[5] outbox stream
-- ARGV[1] group, [2] consumer, [3] entry id, [4] task id, [5] task json, [6] tier,
-- [7] ask name, [8] question, [9] answer schema json, [10] on_timeout, [11] default json,
-- [12] now ms, [13] due ms, [14] events json
-- Returns ok | dup (already done: acked and deleted) | lost (not ours)
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 'lost' end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if redis.call('HGET', KEYS[2], 'state') == 'done' then return 'dup' end
-- deliveries back to 0: this run ended in an outcome, so the resumed run is not taken for
-- one whose earlier deliveries died (the quarantine's count)
redis.call('HSET', KEYS[2], 'state', 'waiting', 'tier', ARGV[6], 'wait_task', ARGV[5],
           'ask', ARGV[7], 'question', ARGV[8], 'ask_schema', ARGV[9], 'on_timeout', ARGV[10],
           'ask_default', ARGV[11], 'asked_ms', ARGV[12], 'wait_due_ms', ARGV[13],
           'deliveries', 0)
redis.call('ZADD', KEYS[3], ARGV[13], 'w:' .. ARGV[4])
redis.call('ZADD', KEYS[4], ARGV[12], ARGV[4])
if ARGV[14] ~= '' then redis.call('XADD', KEYS[5], '*', 'events', ARGV[14]) end
return 'ok'
