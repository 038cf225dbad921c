-- A fair tier's release when the tier caps each key's running tasks (max_running_per_key):
-- as release.lua, except that a key whose tasks hold ARGV[3] slots gets none moved in.
-- A task whose turn comes while its key is at its cap goes to the held set, in order; the
-- held tasks of a key below its cap go in first (their turn came earlier), then the fair
-- queue's, lowest virtual finish time first. One step on the shard's slot: a task is in
-- the fair queue, the held set or the stream, in exactly one of them.
-- What holds a slot is counted from the stream, not kept as a counter a crash could leak:
-- each entry moved in for a key is listed under it (KEYS[4]), and an entry holds its slot
-- while it is pending in the group (running, or its consumer died and a reclaim will run
-- it again) or not read yet. Every end of a task (commit, retry, dead letter, park, a
-- cancelled task's begin) acks it, which frees the slot. A key's list is checked against
-- the PEL only when it is at the cap (and every list when nothing is left to move in), so
-- the check costs O(cap) per key at its cap, not O(tasks).
-- KEYS[1] tier stream, [2] fair queue, [3] fair clock, [4] running (key -> its entry ids,
-- space-separated), [5] held set (scores 0; members '<#key>:<key><seq, 15 digits><member>')
-- ARGV[1] group, [2] count, [3] cap
-- Returns busy (the caller reads in the same transaction, as with release.lua): 1 while
-- a task waits in the fair queue or the held set, or a listed entry still holds a slot (a
-- slot that frees makes no entry a blocked reader would see: the reader comes back soon).
local stream, fset, fclock, frun, held = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local group, count, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

-- include ids

local delivered  -- the group's last-delivered-id, read once, when first needed
local function holds(id)
  local pending = redis.pcall('XPENDING', stream, group, id, id, 1)
  if type(pending) == 'table' and not pending.err and #pending > 0 then return true end
  if delivered == nil then
    delivered = '0-0'
    local groups = redis.pcall('XINFO', 'GROUPS', stream)
    if type(groups) == 'table' and not groups.err then
      for _, g in ipairs(groups) do
        local name, last
        for j = 1, #g, 2 do
          if g[j] == 'name' then name = g[j + 1] elseif g[j] == 'last-delivered-id' then last = g[j + 1] end
        end
        if name == group then delivered = last end
      end
    end
  end
  return id_less(delivered, id)
end

local lists, checked, dirty = {}, {}, {}
local function list_of(key)
  local list = lists[key]
  if not list then
    list = {}
    local s = redis.call('HGET', frun, key)
    if s then for id in string.gmatch(s, '%S+') do list[#list + 1] = id end end
    lists[key] = list
  end
  return list
end
-- Drop the key's entries that no longer hold a slot (once per call: nothing ends during it).
local function check(key)
  if checked[key] then return end
  checked[key] = true
  local list, kept = list_of(key), {}
  for _, id in ipairs(list) do if holds(id) then kept[#kept + 1] = id end end
  if #kept < #list then lists[key], dirty[key] = kept, true end
end
local function free(key)
  if #list_of(key) >= cap then check(key) end
  return cap - #lists[key]
end

-- A fair queue member ('<enq ms> <#reply> <#key> <reply><key><task json>') into the stream.
local function move(key, member)
  local enq, rlen, klen, at = string.match(member, '^(%d+) (%d+) (%d+) ()')
  local kat = at + rlen
  local id = redis.call('XADD', stream, '*', 'task', string.sub(member, kat + klen),
                        'attempt', 1, 'enq', enq, 'reply', string.sub(member, at, kat - 1))
  local list = lists[key]
  list[#list + 1] = id
  dirty[key] = true
end

local budget = count
-- Held keys first, each below its cap: their tasks' turns came while they were at it.
local from = '-'
while budget > 0 do
  local first = redis.call('ZRANGEBYLEX', held, from, '+', 'LIMIT', 0, 1)[1]
  if not first then break end
  local klen, at = string.match(first, '^(%d+):()')
  local prefix = string.sub(first, 1, at + klen - 1)
  local key = string.sub(prefix, at)
  local n = math.min(free(key), budget)
  if n > 0 then
    local take = redis.call('ZRANGEBYLEX', held, '[' .. prefix, '(' .. prefix .. ':',
                            'LIMIT', 0, n)
    for _, m in ipairs(take) do move(key, string.sub(m, #prefix + 16)) end
    redis.call('ZREM', held, unpack(take))
    budget = budget - #take
  end
  from = '(' .. prefix .. ':'
end

-- Then the fair queue, in turn. A key at its cap has its turn passed to the held set (so
-- a capped key's backlog is not popped again and again); at most four pops of `budget`
-- per call, so a capped flood is moved aside in steps, not in one long script.
local clock
local left = {}  -- key -> the last finish time popped of it
local seq = tonumber(redis.call('HGET', fclock, '#') or '0')
local pops = 0
while budget > 0 and pops < 4 do
  local popped = redis.call('ZPOPMIN', fset, budget)
  if #popped == 0 then break end
  pops = pops + 1
  for i = 1, #popped, 2 do
    local member = popped[i]
    local rlen, klen, at = string.match(member, '^%d+ (%d+) (%d+) ()')
    local key = string.sub(member, at + rlen, at + rlen + klen - 1)
    if free(key) > 0 then
      move(key, member)
      budget = budget - 1
    else
      seq = seq + 1
      redis.call('ZADD', held, 0, #key .. ':' .. key .. string.format('%015d', seq) .. member)
    end
    clock = popped[i + 1]
    left[key] = clock
  end
end
if clock then
  for key, tag in pairs(left) do
    local field = 'k:' .. key
    local last = redis.call('HGET', fclock, field)
    if last and tonumber(last) <= tonumber(tag) then redis.call('HDEL', fclock, field) end
  end
  redis.call('HSET', fclock, '@', clock, '#', seq)
end

local waiting = redis.call('ZCARD', fset) + redis.call('ZCARD', held)
if waiting == 0 then
  -- Nothing left to move in: check every listed key, so the lists empty as tasks end and
  -- an idle tier's readers block again (busy 0).
  local all = redis.call('HKEYS', frun)
  for _, key in ipairs(all) do check(key) end
end
for key in pairs(dirty) do
  local list = lists[key]
  if #list == 0 then
    redis.call('HDEL', frun, key)
  else
    redis.call('HSET', frun, key, table.concat(list, ' '))
  end
end
local busy = (waiting > 0 or redis.call('HLEN', frun) > 0) and 1 or 0
return busy
