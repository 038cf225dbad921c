-- Hand back entries at a graceful shutdown: claimable at once, and not counted as a
-- delivery (like XNACK SILENT on Redis 8.8), so deploys never push a long task towards
-- max_deliveries, and the next worker does not take it for one that crashed its process.
-- Only entries this consumer still owns, whose task this consumer is running, are touched.
-- KEYS[1] stream, KEYS[2..n+1] task hashes (one per entry)
-- ARGV[1] group, [2] consumer, [3] idle ms, [4..n+3] entry ids
-- Returns the ids this consumer no longer owns.
local lost = {}
for i = 2, #KEYS do
  local id = ARGV[i + 2]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p > 0 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'IDLE', ARGV[3], 'JUSTID')
    local h = redis.call('HMGET', KEYS[i], 'state', 'owner', 'entry', 'deliveries')
    local n = tonumber(h[4]) or 0
    if h[1] == 'running' and h[2] == ARGV[2] and h[3] == id and n > 0 then
      redis.call('HSET', KEYS[i], 'deliveries', n - 1)
    end
  else
    lost[#lost + 1] = id
  end
end
return lost
