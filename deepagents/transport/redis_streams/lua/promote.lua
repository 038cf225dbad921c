-- Move due members of the delayed set into their tier streams (atomic: two pumps never
-- publish one member twice). A member that is not a delayed task goes to the dead-letter
-- stream (reason decode_error, the member kept as orig_member) in the same step: one bad
-- member must never stop the good ones behind it from being promoted.
-- A waiting task's deadline ('w:<task id>') is not moved here: its id is returned and the
-- member left for the wake script, which needs the task's own keys (every key a script
-- touches is in its KEYS).
-- KEYS[1] delayed set, KEYS[2] dead-letter stream, KEYS[3..] tier streams
-- ARGV[1] now ms, [2] limit, [3..] tier names
-- Returns {promoted, dead-lettered, {task ids of due waits}, {task id, error, ...}}: the
-- last, of the dead-lettered members whose task id could still be read (the worker ends
-- each such task dead with end_damaged.lua: it would stay 'retrying' for ever)
local function parse(member)
  local ok, m = pcall(cjson.decode, member)
  if not ok then return nil, 'not JSON: ' .. tostring(m) end
  if type(m) ~= 'table' then return nil, 'not a JSON object' end
  if type(m.task) ~= 'string' then return nil, 'no task string' end
  local attempt = tonumber(m.attempt)
  if attempt == nil or attempt < 1 or attempt ~= math.floor(attempt) then
    return nil, 'attempt is not an integer >= 1'
  end
  if m.reply == cjson.null then m.reply = nil end
  if m.reply ~= nil and type(m.reply) ~= 'string' then return nil, 'reply is not a string' end
  return m
end

-- The task id of a member that failed the check, if its task is still readable.
local function salvage(member)
  local ok, m = pcall(cjson.decode, member)
  if not ok or type(m) ~= 'table' or type(m.task) ~= 'string' then return nil end
  local parsed, t = pcall(cjson.decode, m.task)
  if not parsed or type(t) ~= 'table' or type(t.task_id) ~= 'string' then return nil end
  return t.task_id
end

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local index = {}
for i = 3, #ARGV do index[ARGV[i]] = i end
local promoted, dead, waits, damaged = 0, 0, {}, {}
for _, member in ipairs(due) do
  if string.sub(member, 1, 2) == 'w:' then
    waits[#waits + 1] = string.sub(member, 3)  -- left in the set for the wake script
  else
    local m, err = parse(member)
    if m then
      local k = index[m.tier] or #KEYS
      redis.call('XADD', KEYS[k], '*', 'task', m.task, 'attempt',
                 string.format('%d', m.attempt), 'enq', ARGV[1], 'reply', m.reply or '')
      promoted = promoted + 1
    else
      redis.call('XADD', KEYS[2], '*', 'source', KEYS[1], 'reason', 'decode_error',
                 'error', err, 'dead_ms', ARGV[1], 'deliveries', '0', 'orig_member', member)
      dead = dead + 1
      local id = salvage(member)
      if id then
        damaged[#damaged + 1] = id
        damaged[#damaged + 1] = err
      end
    end
    redis.call('ZREM', KEYS[1], member)
  end
end
return {promoted, dead, waits, damaged}
