-- release.lua — give back a reserved send slot or a booked turn (call
-- cancelled or rerouted).
--
-- KEYS[1]      sorted set of reserved slots (see pace.lua)
-- KEYS[2]      the carrier's fair shares (hash, see pace.lua)
-- KEYS[3]      expiries of the fair state (sorted set, see pace.lua)
-- ARGV[1]      member whose slot or booking is released
--
-- A fair call's record gives its share the turn it was charged back (once:
-- the record goes with it), so the share's next call books that turn.
--
-- Reply: integer, 1 when a slot or a booking was removed, 0 when the member
-- held none.
local member = ARGV[1]
local removed = redis.call('ZREM', KEYS[1], member)
local r = redis.call('HGET', KEYS[2], 'm:' .. member)
if r then
  local charge, _, _, state, share = string.match(r, '^(%d+) (%d+) (%d+) (%a) (.+)$')
  if charge then
    local v = tonumber(redis.call('HGET', KEYS[2], 'v:' .. share))
    if v then redis.call('HSET', KEYS[2], 'v:' .. share, v - tonumber(charge)) end
    if state == 'b' then redis.call('HINCRBY', KEYS[2], 'booked', -1) end
  end
  redis.call('HDEL', KEYS[2], 'm:' .. member)
  redis.call('ZREM', KEYS[3], 'm:' .. member)
  removed = 1
end
return removed
