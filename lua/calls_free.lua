-- calls_free.lua — give a call's concurrent-call places back (its end).
--
-- KEYS[i]      sorted set of place i (see calls_occupy.lua)
-- ARGV[1]      member whose places are freed
--
-- Reply: integer, the number of sets the member was removed from (0 when it
-- held none: an unknown or already freed call frees nothing).
local removed = 0
for i = 1, #KEYS do
  removed = removed + redis.call('ZREM', KEYS[i], ARGV[1])
end
return removed
