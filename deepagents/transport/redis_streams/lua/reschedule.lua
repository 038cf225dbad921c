-- Hand a delivery back for later: into the delayed set (retry with backoff) or, with
-- due = now, to another tier (degrade). Owner-checked, then ack and delete.
-- KEYS[1] stream, KEYS[2] task hash, KEYS[3] delayed set, KEYS[4] outbox stream
-- ARGV[1] group, [2] consumer, [3] entry id, [4] due ms, [5] member json, [6] events json,
-- [7] '0': the delivery is not counted (a wait, not a failure): the task hash's count of
-- deliveries goes back down by one, as a hand-back does, [8] tokens and [9] cost (USD)
-- the delivery spent on model calls outside recorded steps: added to the task's spend
-- (begin.lua hands it to the next delivery, so the Result counts every delivery's)
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 'lost' end
if redis.call('HGET', KEYS[2], 'state') == 'done' then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  redis.call('XDEL', KEYS[1], ARGV[3])
  return 'dup'
end
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
if tonumber(ARGV[8]) > 0 then redis.call('HINCRBY', KEYS[2], 'spent_tokens', ARGV[8]) end
if tonumber(ARGV[9]) > 0 then redis.call('HINCRBYFLOAT', KEYS[2], 'spent_cost', ARGV[9]) end
redis.call('HSET', KEYS[2], 'state', 'retrying', 'due_ms', ARGV[4])
if ARGV[7] == '0' then
  local n = tonumber(redis.call('HGET', KEYS[2], 'deliveries') or '0')
  if n > 0 then redis.call('HSET', KEYS[2], 'deliveries', n - 1) end
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if ARGV[6] ~= '' then redis.call('XADD', KEYS[4], '*', 'events', ARGV[6]) end
return 'ok'
