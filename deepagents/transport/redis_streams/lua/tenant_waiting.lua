-- One tenant's oldest open questions: its waiting index, oldest first, less the members
-- the shard's index no longer holds (answered, woken or cancelled since they were parked),
-- which are dropped here, in the same step as the check: a task parked again meanwhile
-- is never dropped by mistake.
-- KEYS[1] the tenant's waiting index, KEYS[2] the shard's waiting index
-- ARGV[1] limit
-- Returns {task id, asked at ms, ...} of at most limit live members
local limit = tonumber(ARGV[1])
local out, start = {}, 0
while #out < 2 * limit do
  local batch = redis.call('ZRANGE', KEYS[1], start, start + limit - 1, 'WITHSCORES')
  if #batch == 0 then break end
  local live = 0
  for i = 1, #batch, 2 do
    if redis.call('ZSCORE', KEYS[2], batch[i]) then
      live = live + 1
      if #out < 2 * limit then
        out[#out + 1] = batch[i]
        out[#out + 1] = batch[i + 1]
      end
    else
      redis.call('ZREM', KEYS[1], batch[i])
    end
  end
  start = start + live
end
return out
