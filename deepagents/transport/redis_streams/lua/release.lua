-- A fair tier's read: move up to ARGV[3] tasks of the stream's fair queue into the stream,
-- lowest virtual finish time first (weighted fair queueing over fairness keys), advance
-- the queue's clock to the last one moved, then read new entries for the consumer (no
-- block: the caller blocks on the stream itself when this finds nothing). One step on the
-- shard's slot: a task is in the fair queue or in the stream, never both, never neither.
-- A key whose last queued task leaves loses its finish time: coming back, it starts at
-- the clock (no credit for time away).
-- A member is '<enq ms> <#reply> <#key> <reply><key><task json>' (the enqueue script's).
-- KEYS[1] tier stream, KEYS[2] fair queue, KEYS[3] fair clock, KEYS[4] held set
-- ARGV[1] group, [2] consumer, [3] count
-- Returns XREADGROUP's reply (nil when nothing is new)
-- Tasks held for a slot while the tier had a per-key cap (release_capped.lua) go first,
-- once the cap is gone: their turns came before the fair queue's.
local count = tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[4]) == 1 then
  local held = redis.call('ZRANGE', KEYS[4], 0, count - 1)
  for _, m in ipairs(held) do
    local klen, at = string.match(m, '^(%d+):()')
    local member = string.sub(m, at + klen + 15)
    local enq, rlen, mklen, mat = string.match(member, '^(%d+) (%d+) (%d+) ()')
    local kat = mat + rlen
    redis.call('XADD', KEYS[1], '*', 'task', string.sub(member, kat + mklen), 'attempt', 1,
               'enq', enq, 'reply', string.sub(member, mat, kat - 1))
  end
  if #held > 0 then redis.call('ZREM', KEYS[4], unpack(held)) end
  count = count - #held
end
local popped = count > 0 and redis.call('ZPOPMIN', KEYS[2], count) or {}
if #popped > 0 then
  local clock
  local left = {}  -- key -> the last finish time moved of it
  for i = 1, #popped, 2 do
    local member = popped[i]
    local enq, rlen, klen, at = string.match(member, '^(%d+) (%d+) (%d+) ()')
    local kat = at + rlen
    local tat = kat + klen
    redis.call('XADD', KEYS[1], '*', 'task', string.sub(member, tat), 'attempt', 1,
               'enq', enq, 'reply', string.sub(member, at, kat - 1))
    clock = popped[i + 1]
    left[string.sub(member, kat, tat - 1)] = clock
  end
  -- Once per key of the batch, not per task.
  for key, tag in pairs(left) do
    local field = 'k:' .. key
    local last = redis.call('HGET', KEYS[3], field)
    if last and tonumber(last) <= tonumber(tag) then redis.call('HDEL', KEYS[3], field) end
  end
  redis.call('HSET', KEYS[3], '@', clock)
end
-- A missing group (Redis lost its data) answers NOGROUP as a plain XREADGROUP would, on
-- 6.2 too (whose script errors say "Error running script" first): the worker re-creates
-- the group from the stream's start, and reads what was moved in here.
local read = redis.pcall('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                         'STREAMS', KEYS[1], '>')
if type(read) == 'table' and read.err then
  local at = string.find(read.err, 'NOGROUP', 1, true)
  return redis.error_reply(at and string.sub(read.err, at) or read.err)
end
return read
