-- release.lua — give back a reserved send slot (call cancelled or rerouted).
--
-- KEYS[1]      sorted set of reserved slots (see pace.lua)
-- ARGV[1]      member whose slot is released
--
-- Reply: integer, 1 when a slot was removed, 0 when the member held none.
return redis.call('ZREM', KEYS[1], ARGV[1])
