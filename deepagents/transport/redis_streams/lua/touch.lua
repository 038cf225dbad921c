-- Heartbeat for entries this consumer still owns: XCLAIM ... IDLE 0 JUSTID resets their
-- idle time without counting a delivery. (A graceful shutdown hands back with
-- hand_back.lua.) Never takes an entry that another consumer owns now.
-- KEYS[1] stream; ARGV[1] group, [2] consumer, [3..] entry ids
-- Returns the ids this consumer no longer owns.
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p > 0 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', 0, 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
