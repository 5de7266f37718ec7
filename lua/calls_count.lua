-- calls_count.lua — live calls in each concurrent-call set (read-only).
--
-- KEYS[i]      sorted set of place i (see calls_occupy.lua)
--
-- Reply (array of integers): [1] Redis TIME in µs, [1+i] members of set i
-- whose expiry is still ahead (score > now).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local reply = {now}
for i = 1, #KEYS do
  reply[1 + i] = redis.call('ZCOUNT', KEYS[i], string.format('(%d', now), '+inf')
end
return reply
