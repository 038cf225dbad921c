-- Move entries no consumer has been given yet from one version's tier stream to another's,
-- and the source version's delayed retries to the target's delayed set (a rollback or a
-- promotion). Atomic on the shard's slot: an entry is either read by a worker of the
-- source version first (then it stays: it has started, and keeps its owner-checked
-- commit) or moved here, exactly once (XADD to the target, XDEL from the source).
-- KEYS[1] source stream, KEYS[2] target stream, KEYS[3] source delayed set,
-- KEYS[4] target delayed set, KEYS[5..] the candidates' task hashes
-- ARGV[1] group, [2] delayed members to move at most, then per candidate: entry id
-- Returns {entries moved, delayed members moved}
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function after(a, b)  -- id a sorts after id b
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am > bm or (am == bm and as > bs)
end

local last = nil
if redis.call('EXISTS', KEYS[1]) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    if info['name'] == ARGV[1] then last = info['last-delivered-id'] end
  end
end

local moved = 0
for i = 5, #KEYS do
  local id = ARGV[i - 2]
  if last == nil or after(id, last) then
    local found = redis.call('XRANGE', KEYS[1], id, id)
    if #found == 1 then
      local fields = found[1][2]
      local new = redis.call('XADD', KEYS[2], '*', unpack(fields))
      redis.call('XDEL', KEYS[1], id)
      if redis.call('HGET', KEYS[i], 'entry') == id then
        redis.call('HSET', KEYS[i], 'entry', new)
      end
      moved = moved + 1
    end
  end
end

local delayed = 0
local limit = tonumber(ARGV[2])
if limit > 0 then
  local members = redis.call('ZRANGE', KEYS[3], 0, limit - 1, 'WITHSCORES')
  for i = 1, #members, 2 do
    redis.call('ZADD', KEYS[4], members[i + 1], members[i])
    redis.call('ZREM', KEYS[3], members[i])
    delayed = delayed + 1
  end
end
return {moved, delayed}
