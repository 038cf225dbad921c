-- Record a running task's completed step(s) or checkpoint, owner-checked as commit is:
-- only the consumer that holds the entry (per XPENDING), and only while the task has no
-- terminal result, may write. A stale worker (paused, partitioned, reclaimed) is refused.
-- KEYS[1] stream, KEYS[2] task hash, KEYS[3] steps hash, KEYS[4] outbox stream
-- ARGV[1] group, [2] consumer, [3] entry id, [4] events json ('' = none),
-- then field, value pairs to set in the steps hash
-- Returns ok | lost (another consumer owns the entry, or it is gone) | dup (a terminal
-- result is there). Running it again after an ambiguous failure is safe: it sets the same
-- values again.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 'lost' end
local state = redis.call('HGET', KEYS[2], 'state')
if state == 'done' or state == 'dead' then return 'dup' end
if #ARGV > 4 then
  redis.call('HSET', KEYS[3], unpack(ARGV, 5))
  -- the next delivery's begin tells it there are records to read
  redis.call('HSET', KEYS[2], 'stepped', '1')
end
if ARGV[4] ~= '' then redis.call('XADD', KEYS[4], '*', 'events', ARGV[4]) end
return 'ok'
