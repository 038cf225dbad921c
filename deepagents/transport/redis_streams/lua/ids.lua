-- Copied into the scripts that compare entry ids, in place of their line naming this
-- file (scripts.py); not a script of its own.
-- Entry ids compared as Redis orders them.
local function id_less(a, b)
  local am, as = string.match(a, '(%d+)-(%d+)')
  local bm, bs = string.match(b, '(%d+)-(%d+)')
  am, bm = tonumber(am), tonumber(bm)
  return am < bm or (am == bm and tonumber(as) < tonumber(bs))
end
