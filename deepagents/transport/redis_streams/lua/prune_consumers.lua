-- Remove a group's consumers that are gone: idle for at least ARGV[2] ms and owning no
-- pending entry. Checked and removed in one step, so an entry can never be dropped with its
-- consumer (XGROUP DELCONSUMER discards a consumer's pending entries). A consumer that is
-- only quiet comes back by itself at its next read.
-- KEYS[1] stream; ARGV[1] group, [2] min idle ms, [3] the calling consumer (always kept)
-- Returns the names removed.
local removed = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f.name ~= ARGV[3] and f.pending == 0 and f.idle >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f.name)
    removed[#removed + 1] = f.name
  end
end
return removed
