-- A fair tier's release: move up to ARGV[1] tasks of the stream's fair queue into the
-- stream, lowest virtual finish time first (weighted fair queueing over fairness keys), and
-- advance the queue's clock to the last one moved. The caller's read (XREADGROUP, no block)
-- goes with this call in one transaction (MULTI/EXEC), not inside it: a script's reply
-- passes through Lua values, which costs the server more per entry read than the read
-- itself (docs/benchmarks.md, "Fair share: a stream per key"). One step on the shard's
-- slot: a task is in the fair queue or in the stream, never both, never neither.
-- A key whose last queued task leaves loses its finish time: coming back, it starts at
-- the clock (no credit for time away).
-- A member is '<enq ms> <#reply> <#key> <reply><key><task json>' (the enqueue script's).
-- KEYS[1] tier stream, KEYS[2] fair queue, KEYS[3] fair clock, KEYS[4] held set
-- ARGV[1] count
-- Returns the number of tasks moved in
-- Tasks held for a slot while the tier had a per-key cap (release_capped.lua) go first,
-- once the cap is gone: their turns came before the fair queue's.
local count = tonumber(ARGV[1])
local moved = 0
if redis.call('EXISTS', KEYS[4]) == 1 then
  local held = redis.call('ZRANGE', KEYS[4], 0, count - 1)
  for _, m in ipairs(held) do
    local klen, at = string.match(m, '^(%d+):()')
    local member = string.sub(m, at + klen + 15)
    local enq, rlen, mklen, mat = string.match(member, '^(%d+) (%d+) (%d+) ()')
    local kat = mat + rlen
    redis.call('XADD', KEYS[1], '*', 'task', string.sub(member, kat + mklen), 'attempt', '1',
               'enq', enq, 'reply', string.sub(member, mat, kat - 1))
  end
  if #held > 0 then redis.call('ZREM', KEYS[4], unpack(held)) end
  count = count - #held
  moved = #held
end
-- The lowest `count` members without their scores (ZPOPMIN would hand Lua a score string
-- per task), then removed by rank; the clock is the last one's score.
local popped = count > 0 and redis.call('ZRANGE', KEYS[2], 0, count - 1) or {}
if #popped > 0 then
  local clock = redis.call('ZSCORE', KEYS[2], popped[#popped])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, #popped - 1)
  local keys = {}  -- the keys moved of, once each
  for i = 1, #popped do
    local member = popped[i]
    local enq, rlen, klen, at = string.match(member, '^(%d+) (%d+) (%d+) ()')
    local kat = at + rlen
    local tat = kat + klen
    -- '1', not 1: a Lua number is formatted into a string per call.
    redis.call('XADD', KEYS[1], '*', 'task', string.sub(member, tat), 'attempt', '1',
               'enq', enq, 'reply', string.sub(member, at, kat - 1))
    keys[string.sub(member, kat, tat - 1)] = true
  end
  -- Once per key of the batch, not per task: a key whose last finish time is at or below
  -- the clock has nothing left queued (what is left scores at least the clock, and a key's
  -- times grow), or only a task tied with the clock, which its next task's time,
  -- max(clock, last) + 1 / weight, does not tell apart.
  for key in pairs(keys) do
    local field = 'k:' .. key
    local last = redis.call('HGET', KEYS[3], field)
    if last and tonumber(last) <= tonumber(clock) then redis.call('HDEL', KEYS[3], field) end
  end
  redis.call('HSET', KEYS[3], '@', clock)
  moved = moved + #popped
end
return moved
