-- Enqueue a batch of tasks of one shard, each unless its task hash already exists
-- (idempotent on task_id), each with its location record when one is given. A task with a
-- due time goes into the shard's delayed set instead (state scheduled): the promote script
-- moves it to its tier stream when due, as it moves a retry.
-- A task of a fair tier (its weight given) goes into its stream's fair queue (score: its
-- virtual finish time, max(the queue's clock, its key's last finish) + 1 / weight), unless
-- the stream has nothing unread and the fair queue is empty: then straight into the
-- stream, so a reader blocked there wakes. The release script moves the rest in.
-- A task of a tier with a per-key cap goes straight in only if its key's listed entries
-- (the release script's running list) are fewer than the cap, and is listed there; else
-- into the fair queue, where the release script checks the list against the PEL.
-- KEYS[1] outbox stream, KEYS[2] delayed set, then per task: tier stream, task hash[,
-- fair queue, fair clock, fair running list, held set][, location key]
-- ARGV[1] now ms, [2] location TTL s ('' = no location keys: the caller wrote them, or
-- they live on other nodes of a cluster), [3] '1': the fair keys and arguments are there,
-- then per task: task json, reply channel, max backlog, tier, outbox events (a JSON array;
-- '' = outbox off), due ms ('' = now)[, fairness key, weight ('' = not fair), cap ('' =
-- none)][, location value]
-- Returns, flat, per task: status, entry id; status ok | exists (entry id of the first
-- enqueue) | overloaded (entry id ''). A scheduled task has no entry yet: its id is ''.
-- Flat, not a pair per task: 97.6k -> 91.9k Redis instructions per task of submit_many
-- (callgrind; docs/benchmarks.md).
-- A scheduled task is admitted against its tier stream's backlog as any task is: the limit
-- bounds what is accepted, not only what is queued now.
-- On one server the location key may sit in another hash slot than the shard: written in
-- the same script as the entry, an enqueued task never lacks its location record.
-- Order: every decision first, then every location record, then the entries. A script is
-- not rolled back when a command fails in it (an ACL refusing SET, say): failing at the
-- first write, it has enqueued nothing, so the caller's "not accepted" is true.
local now, ttl = ARGV[1], ARGV[2]
local located, fair = ttl ~= '', ARGV[3] == '1'
local fk, fa = fair and 4 or 0, fair and 3 or 0  -- the fair keys and arguments per task
local kstride, astride = (located and 3 or 2) + fk, (located and 7 or 6) + fa
local n = (#KEYS - 2) / kstride
local out, accepted, queued, first, again = {}, {}, {}, {}, {}

-- include ids

-- Whether some group of the stream has not read its last entry yet (a reader will come
-- back for it, and release the fair queue then).
local function unread(stream)
  local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)[1]
  if not last then return false end
  local groups = redis.call('XINFO', 'GROUPS', stream)
  if #groups == 0 then return true end
  for _, g in ipairs(groups) do
    for j = 1, #g, 2 do
      if g[j] == 'last-delivered-id' and id_less(g[j + 1], last[1]) then return true end
    end
  end
  return false
end

local holding = {}  -- stream -> its fair tasks go to the fair queue (else: straight in)
local function fair_hold(stream, fset)
  local h = holding[stream]
  if h == nil then
    h = redis.call('ZCARD', fset) > 0 or unread(stream)
  end
  holding[stream] = true  -- after this one, the stream has something unread
  return h
end

-- A capped key's entries listed as holding a slot: at the cap, it waits its turn.
local function at_cap(frun, key, cap)
  if cap == '' then return false end
  local ids = redis.call('HGET', frun, key)
  if not ids then return false end
  local _, spaces = string.gsub(ids, ' ', '')
  return spaces + 1 >= tonumber(cap)
end

local function listed(frun, key, id)
  local ids = redis.call('HGET', frun, key)
  redis.call('HSET', frun, key, ids and ids .. ' ' .. id or id)
end

for i = 0, n - 1 do
  local stream, hash = KEYS[3 + i * kstride], KEYS[4 + i * kstride]
  if first[hash] then  -- the same task twice in this batch: the first one enqueues it
    again[#again + 1] = {i, first[hash]}
  elseif redis.call('EXISTS', hash) == 1 then
    out[2 * i + 1], out[2 * i + 2] = 'exists', redis.call('HGET', hash, 'entry') or ''
  else
    -- XLEN once per stream, then counted here (101.0k -> 97.6k Redis instructions per
    -- task of submit_many, callgrind; docs/benchmarks.md).
    -- A fair tier's backlog counts its fair queue too.
    local length = queued[stream]
    if not length then
      length = redis.call('XLEN', stream)
      if fair then length = length + redis.call('ZCARD', KEYS[5 + i * kstride]) end
      if fair and ARGV[12 + i * astride] ~= '' then  -- a capped tier: its held set too
        length = length + redis.call('ZCARD', KEYS[8 + i * kstride])
      end
    end
    if length >= tonumber(ARGV[6 + i * astride]) then
      queued[stream] = length
      out[2 * i + 1], out[2 * i + 2] = 'overloaded', ''
    else
      queued[stream] = length + 1
      accepted[#accepted + 1] = i
      first[hash] = i
    end
  end
end
if located then
  for _, i in ipairs(accepted) do
    redis.call('SET', KEYS[5 + fk + i * kstride], ARGV[4 + i * astride + 6 + fa], 'EX', ttl)
  end
end
local events = {}
for _, i in ipairs(accepted) do
  local stream, hash, a = KEYS[3 + i * kstride], KEYS[4 + i * kstride], 4 + i * astride
  local reply, due = ARGV[a + 1], ARGV[a + 5]
  local weight = fair and ARGV[a + 7] or ''
  local cap = fair and ARGV[a + 8] or ''
  local id = ''
  if due == '' and weight ~= '' and (fair_hold(stream, KEYS[5 + i * kstride])
                                     or at_cap(KEYS[7 + i * kstride], ARGV[a + 6], cap)) then
    local fset, fclock, key = KEYS[5 + i * kstride], KEYS[6 + i * kstride], ARGV[a + 6]
    local at = redis.call('HMGET', fclock, '@', 'k:' .. key)
    local tag = math.max(tonumber(at[1] or '0'), tonumber(at[2] or '0')) + 1 / tonumber(weight)
    tag = string.format('%.17g', tag)
    redis.call('HSET', fclock, 'k:' .. key, tag)
    -- '<enq> <#reply> <#key> <reply><key><task>': cut by lengths, not parsed (a JSON
    -- member cost the release a decode of the task per task).
    redis.call('ZADD', fset, tag, now .. ' ' .. #reply .. ' ' .. #key .. ' ' .. reply .. key
                                  .. ARGV[a])
    redis.call('HSET', hash, 'state', 'queued', 'entry', '', 'tier', ARGV[a + 3],
               'reply', reply, 'enq_ms', now, 'deliveries', 0)
  elseif due == '' then
    id = redis.call('XADD', stream, '*', 'task', ARGV[a], 'attempt', 1, 'enq', now,
                    'reply', reply)
    if cap ~= '' and weight ~= '' then listed(KEYS[7 + i * kstride], ARGV[a + 6], id) end
    redis.call('HSET', hash, 'state', 'queued', 'entry', id, 'tier', ARGV[a + 3],
               'reply', reply, 'enq_ms', now, 'deliveries', 0)
  else  -- the member a retry's reschedule writes, with attempt 1
    redis.call('ZADD', KEYS[2], due, cjson.encode({task = ARGV[a], attempt = 1,
                                                   tier = ARGV[a + 3], reply = reply}))
    redis.call('HSET', hash, 'state', 'scheduled', 'entry', '', 'tier', ARGV[a + 3],
               'reply', reply, 'enq_ms', now, 'due_ms', due, 'deliveries', 0)
  end
  if ARGV[a + 4] ~= '' then events[#events + 1] = a + 4 end
  out[2 * i + 1], out[2 * i + 2] = 'ok', id
end
for _, pair in ipairs(again) do
  out[2 * pair[1] + 1], out[2 * pair[1] + 2] = 'exists', out[2 * pair[2] + 2]
end
-- One task's events go as they came: no copy of its array (a lone submit's 134k -> 123k
-- Redis instructions, callgrind; docs/benchmarks.md).
if #events == 1 then
  redis.call('XADD', KEYS[1], '*', 'events', ARGV[events[1]])
elseif #events > 1 then
  for j, at in ipairs(events) do events[j] = string.sub(ARGV[at], 2, -2) end  -- the items
  redis.call('XADD', KEYS[1], '*', 'events', '[' .. table.concat(events, ',') .. ']')
end
return out
