-- Enqueue a batch of tasks of one shard, each unless its task hash already exists
-- (idempotent on task_id), each with its location record when one is given. A task with a
-- due time goes into the shard's delayed set instead (state scheduled): the promote script
-- moves it to its tier stream when due, as it moves a retry.
-- KEYS[1] outbox stream, KEYS[2] delayed set, then per task: tier stream, task hash[,
-- location key]
-- ARGV[1] now ms, [2] location TTL s ('' = no location keys: the caller wrote them, or
-- they live on other nodes of a cluster), then per task: task json, reply channel,
-- max backlog, tier, outbox events (a JSON array; '' = outbox off), due ms ('' = now)[,
-- location value]
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
local located = ttl ~= ''
local kstride, astride = located and 3 or 2, located and 7 or 6
local n = (#KEYS - 2) / kstride
local out, accepted, queued, first, again = {}, {}, {}, {}, {}
for i = 0, n - 1 do
  local stream, hash = KEYS[3 + i * kstride], KEYS[4 + i * kstride]
  if first[hash] then  -- the same task twice in this batch: the first one enqueues it
    again[#again + 1] = {i, first[hash]}
  elseif redis.call('EXISTS', hash) == 1 then
    out[2 * i + 1], out[2 * i + 2] = 'exists', redis.call('HGET', hash, 'entry') or ''
  else
    -- XLEN once per stream, then counted here (101.0k -> 97.6k Redis instructions per
    -- task of submit_many, callgrind; docs/benchmarks.md).
    local length = queued[stream] or redis.call('XLEN', stream)
    if length >= tonumber(ARGV[5 + i * astride]) then
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
    redis.call('SET', KEYS[5 + i * kstride], ARGV[3 + i * astride + 6], 'EX', ttl)
  end
end
local events = {}
for _, i in ipairs(accepted) do
  local stream, hash, a = KEYS[3 + i * kstride], KEYS[4 + i * kstride], 3 + i * astride
  local reply, due = ARGV[a + 1], ARGV[a + 5]
  local id = ''
  if due == '' then
    id = redis.call('XADD', stream, '*', 'task', ARGV[a], 'attempt', 1, 'enq', now,
                    'reply', reply)
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
