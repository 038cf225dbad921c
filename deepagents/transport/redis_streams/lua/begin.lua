-- Begin a batch of deliveries of one stream: skip duplicates, mark the rest running, and
-- record each start in the outbox as it happens.
-- KEYS[1] stream, KEYS[2] outbox stream, KEYS[3..n+2] task hashes (one per entry)
-- ARGV[1] group, [2] consumer, [3] now ms, [4] fresh ('1': the batch was just read with
-- '>' by this consumer), then per entry: entry id, attempt, started event ('' = none: the
-- event's JSON up to its last value, the delivery count, which only this script knows)
-- Returns per entry {status, deliveries, stepped[, first ms, spent tokens, spent cost]}:
--   ok | dup (already done: acked and deleted) | lost (another consumer owns it now) |
--   gone (no longer pending); stepped is 1 when the task has step records
--   (record_steps.lua marks its hash), else 0. A task begun before (a redelivery, a retry,
--   a resume) also gets when it first began and what its earlier deliveries spent on
--   model calls outside recorded steps (reschedule.lua), as strings: its Result's latency
--   runs from that first start, its tokens and cost add that spend.
-- A fresh batch skips the ownership check: nobody can have claimed an entry before it
-- idled for the visibility timeout, and the commit checks the owner anyway, so a worker
-- that stalls that long between read and begin only runs the agent in vain.
local fresh = ARGV[4] == '1'
local out, events = {}, {}
for i = 3, #KEYS do
  local base = 5 + (i - 3) * 3
  local id, attempt, event = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local skip = nil
  if not fresh then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
    if #p == 0 then skip = 'gone' elseif p[1][2] ~= ARGV[2] then skip = 'lost' end
  end
  if skip then
    out[#out + 1] = {skip, 0}
  else
    local h = redis.call('HMGET', KEYS[i], 'state', 'deliveries', 'stepped', 'first_ms',
                         'spent_tokens', 'spent_cost')
    if h[1] == 'done' then
      redis.call('XACK', KEYS[1], ARGV[1], id)
      redis.call('XDEL', KEYS[1], id)
      out[#out + 1] = {'dup', 0}
    else
      local n = (tonumber(h[2]) or 0) + 1
      if h[4] then
        redis.call('HSET', KEYS[i], 'state', 'running', 'owner', ARGV[2], 'entry', id,
                   'attempt', attempt, 'started_ms', ARGV[3], 'deliveries', n)
        out[#out + 1] = {'ok', n, h[3] and 1 or 0, h[4], h[5] or '0', h[6] or '0'}
      else
        redis.call('HSET', KEYS[i], 'state', 'running', 'owner', ARGV[2], 'entry', id,
                   'attempt', attempt, 'started_ms', ARGV[3], 'deliveries', n,
                   'first_ms', ARGV[3])
        out[#out + 1] = {'ok', n, h[3] and 1 or 0}
      end
      if event ~= '' then events[#events + 1] = event .. n .. '}' end
    end
  end
end
if #events > 0 then
  redis.call('XADD', KEYS[2], '*', 'events', '[' .. table.concat(events, ',') .. ']')
end
return out
