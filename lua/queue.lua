-- queue.lua — how many calls wait for a slot of a carrier, and for how long (read-only).
--
-- KEYS[1]      sorted set of reserved slots (see pace.lua)
-- KEYS[2]      the carrier's fair shares (hash, see pace.lua): its bookings
-- ARGV[1]      interval between slots (integer µs, > 0)
--
-- Reply (array of integers):
--   [1] now_us     Redis TIME in µs
--   [2] queued     slots scored > now, and turns booked (calls still waiting to be sent)
--   [3] wait_us    max(0, last + interval - now): the least wait of a call reserving now
--                  first come, first served
--   [4] sent       slots scored in (now - 1 s, now]: calls sent in the last second
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local queued = redis.call('ZCOUNT', key, string.format('%d', now + 1), '+inf')
local booked = tonumber(redis.call('HGET', KEYS[2], 'booked')) or 0
if booked > 0 then queued = queued + booked end
local wait = 0
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then
  wait = tonumber(last[2]) + tonumber(ARGV[1]) - now
  if wait < 0 then wait = 0 end
end
-- %d: Lua's tostring keeps 14 digits, too few for µs since 1970.
local sent = redis.call('ZCOUNT', key, string.format('(%d', now - 1000000), string.format('%d', now))
return {now, queued, wait, sent}
