-- counts.lua — calls currently in the rolling window of N buckets (read-only).
--
-- KEYS[i]      sorted set of bucket i (see admit.lua)
-- ARGV[i]      window of bucket i (integer µs, > 0)
--
-- Reply (array of integers):
--   [1] now_us        Redis TIME in µs
--   [1+i] count_i     entries of bucket i scored > now - window
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local reply = {now}
for i = 1, #KEYS do
  local w = tonumber(ARGV[i])
  reply[1 + i] = redis.call('ZCOUNT', KEYS[i], now - w + 1, '+inf')
end
return reply
