-- A dead consumer's entries become claimable at once: its registry heartbeat lapsed, so
-- nothing will touch them again, and waiting out the visibility timeout only delays them.
-- XCLAIM ... IDLE <visibility timeout> JUSTID, naming the dead consumer itself: its owner and
-- delivery count stay as they are, only the idle time changes; the ordinary reclaim
-- (XAUTOCLAIM) then takes them, counting the delivery. An entry whose body is gone is left
-- alone: XCLAIM would drop it from the PEL unreported; XAUTOCLAIM reports it.
-- KEYS[1] stream; ARGV[1] group, [2] the dead consumer, [3] idle ms, [4] most entries
-- Returns how many entries were made claimable.
local n = 0
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', tonumber(ARGV[4]), ARGV[2])
for _, p in ipairs(pending) do
  local id = p[1]
  if #redis.call('XRANGE', KEYS[1], id, id) > 0 then
    if p[3] < tonumber(ARGV[3]) then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'IDLE', ARGV[3], 'JUSTID')
    end
    n = n + 1
  end
end
return n
