-- Move a delivery to the dead-letter stream with its reason, keeping the original fields.
-- KEYS[1] stream, KEYS[2] task hash, KEYS[3] dlq stream, KEYS[4] outbox stream, KEYS[5]
-- the task's step records (which expire with the result)
-- ARGV[1] group, [2] consumer, [3] entry id, [4] reason, [5] error text, [6] now ms,
-- ARGV[7] result json ('' = no task hash to update), [8] reply channel, [9] ttl s,
-- ARGV[10] events json, [11] '1' = owner check, [12] '1' = the task id was read from an
-- entry that did not decode: update the task hash only if it names this entry (it was
-- enqueued with it), never another task's; if not, record ARGV[13]'s events instead
-- (the same, naming no task)
if ARGV[11] == '1' then
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
  if #p == 0 or p[1][2] ~= ARGV[2] then return 'lost' end
end
local result, events = ARGV[7], ARGV[10]
if result ~= '' and ARGV[12] == '1' and redis.call('HGET', KEYS[2], 'entry') ~= ARGV[3] then
  result, events = '', ARGV[13]
end
local deliveries = '0'
if result ~= '' then
  deliveries = redis.call('HGET', KEYS[2], 'deliveries') or '0'
end
local args = {'source', KEYS[1], 'entry', ARGV[3], 'reason', ARGV[4], 'error', ARGV[5],
              'dead_ms', ARGV[6], 'deliveries', deliveries}
local entry = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3])
if #entry > 0 and entry[1][2] then
  local fields = entry[1][2]
  for i = 1, #fields, 2 do
    args[#args + 1] = 'orig_' .. fields[i]
    args[#args + 1] = fields[i + 1]
  end
end
redis.call('XADD', KEYS[3], '*', unpack(args))
if result ~= '' then
  redis.call('HSET', KEYS[2], 'state', 'dead', 'result', result, 'finished_ms', ARGV[6])
  redis.call('EXPIRE', KEYS[2], ARGV[9])
  redis.call('EXPIRE', KEYS[5], ARGV[9])
  if ARGV[8] ~= '' then redis.call('PUBLISH', ARGV[8], result) end
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if events ~= '' then redis.call('XADD', KEYS[4], '*', 'events', events) end
return 'ok'
