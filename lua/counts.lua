-- counts.lua — the state of N buckets (read-only): calls in each rolling
-- window, tokens in use in each token bucket.
--
-- KEYS, ARGV[2..]   as admit.lua, without the member: KEYS[i] the sorted set of
--                   bucket i, KEYS[N+j] the hash of the j-th token bucket;
-- ARGV[3i-2]        bucket i: limit or capacity (tokens)
-- ARGV[3i-1]        bucket i: window (integer µs, > 0)
-- ARGV[3i]          bucket i: 0 = rolling window, > 0 = token bucket rate (µtokens/s)
--
-- Reply (array of integers):
--   [1] now_us        Redis TIME in µs
--   [1+i] count_i     rolling window: entries of bucket i scored > now - window;
--                     token bucket: capacity - whole tokens left at now
local U = 1000000
local t = redis.call('TIME')
local now = tonumber(t[1]) * U + tonumber(t[2])
local n = #ARGV / 3
if n < 1 or n ~= math.floor(n) then
  return redis.error_reply('counts.lua: ARGV must be 3 values per bucket')
end
local reply = {now}
local tb = 0
for i = 1, n do
  local limit, w, rate = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  if rate > 0 then
    tb = tb + 1
    local cap = limit * U
    local h = redis.call('HMGET', KEYS[n + tb], 'tokens', 'last')
    local tokens, last = tonumber(h[1]), tonumber(h[2])
    if not tokens or not last then
      tokens = cap
    elseif now > last then
      local e = now - last
      local es = math.floor(e / U)
      if es * rate >= cap - tokens then
        tokens = cap
      else
        local ef = e - es * U
        local q = math.floor(rate / U)
        tokens = tokens + es * rate + ef * q + math.floor(ef * (rate - q * U) / U)
      end
    end
    if tokens > cap then tokens = cap end
    reply[1 + i] = limit - math.floor(tokens / U)
  else
    reply[1 + i] = redis.call('ZCOUNT', KEYS[i], now - w + 1, '+inf')
  end
end
if #KEYS ~= n + tb then
  return redis.error_reply('counts.lua: KEYS must be one per bucket and one hash per token bucket')
end
return reply
