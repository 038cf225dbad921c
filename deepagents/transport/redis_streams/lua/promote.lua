-- Move due members of the delayed set into their tier streams (atomic: two pumps never
-- publish one member twice).
-- KEYS[1] delayed set, KEYS[2..] tier streams; ARGV[1] now ms, [2] limit, [3..] tier names
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local index = {}
for i = 3, #ARGV do index[ARGV[i]] = i - 1 end
for _, member in ipairs(due) do
  local m = cjson.decode(member)
  local k = index[m.tier] or #KEYS
  redis.call('XADD', KEYS[k], '*', 'task', m.task, 'attempt', tostring(m.attempt),
             'enq', ARGV[1], 'reply', m.reply or '')
  redis.call('ZREM', KEYS[1], member)
end
return #due
