-- A page of open questions from a waiting index: a tenant's (KEYS[1]), oldest or newest
-- first, after a cursor, less the members the shard's index (KEYS[2]) no longer holds
-- (answered, woken or cancelled since they were parked), which are dropped here, in the
-- same step as the check: a task parked again meanwhile is never dropped by mistake.
-- With KEYS[1] == KEYS[2] it pages the shard's index itself (nothing is dropped).
-- KEYS[1] the index listed, KEYS[2] the shard's waiting index
-- ARGV[1] limit, ARGV[2] 'asc' (oldest first) or 'desc' (newest first)
-- ARGV[3] the cursor's asked at ms ('' for the first page), ARGV[4] the cursor's task id:
--         the page starts after (score, member) in the listed order
-- Returns {task id, asked at ms, ...} of at most limit live members
local limit = tonumber(ARGV[1])
local desc = ARGV[2] == 'desc'
local cursor = ARGV[3] ~= nil and ARGV[3] ~= ''
local at = cursor and tonumber(ARGV[3]) or nil
local after = ARGV[4] or ''
local own = KEYS[1] == KEYS[2]

-- Bytewise, as the index orders members of one score (Lua's < follows the locale).
local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function past_cursor(member, score)
  if not cursor or score ~= at then return true end
  if desc then return before(member, after) end
  return before(after, member)
end

local out, start = {}, 0
while #out < 2 * limit do
  local batch
  if desc then
    batch = redis.call('ZREVRANGEBYSCORE', KEYS[1], cursor and ARGV[3] or '+inf', '-inf',
      'WITHSCORES', 'LIMIT', start, limit)
  else
    batch = redis.call('ZRANGEBYSCORE', KEYS[1], cursor and ARGV[3] or '-inf', '+inf',
      'WITHSCORES', 'LIMIT', start, limit)
  end
  if #batch == 0 then break end
  local kept = 0
  for i = 1, #batch, 2 do
    local member, score = batch[i], batch[i + 1]
    if not past_cursor(member, tonumber(score)) then
      kept = kept + 1
    elseif own or redis.call('ZSCORE', KEYS[2], member) then
      kept = kept + 1
      if #out < 2 * limit then
        out[#out + 1] = member
        out[#out + 1] = score
      end
    else
      redis.call('ZREM', KEYS[1], member)
    end
  end
  start = start + kept
end
return out
