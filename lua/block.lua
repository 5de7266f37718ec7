-- block.lua — stop the pool sending a carrier new calls for a while (its
-- 503 with Retry-After), by reserving a blocking span in its slot set.
--
-- KEYS[1]      sorted set of reserved slots (see pace.lua)
-- ARGV[1]      span (integer µs, > 0) from now during which no slot is granted
--
-- The span is one member, "retry-after", scored now + span: pace.lua takes
-- slot = max(now, last + interval), so no Reserve of any node gets a slot
-- before the span ends (a call whose max_wait is shorter goes elsewhere). A
-- span that ends before the last reserved slot changes nothing; a longer
-- one replaces a shorter one.
--
-- Reply (array of integers):
--   [1] until_us  end of the span in Redis TIME µs (the later of the old and new)
--   [2] now_us    Redis TIME in µs
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local span = tonumber(ARGV[1])
local until_us = now + span

local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) >= until_us then
  return {tonumber(last[2]), now}
end
redis.call('ZADD', key, until_us, 'retry-after')
redis.call('PEXPIRE', key, math.ceil((span + 1000000) / 1000) + 1000)
return {until_us, now}
