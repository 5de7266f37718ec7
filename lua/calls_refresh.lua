-- calls_refresh.lua — extend the places of live calls in one set (batched).
--
-- KEYS[1]      sorted set of one place (see calls_occupy.lua)
-- ARGV[1]      ttl: integer µs from now the places live (> 0)
-- ARGV[2..]    members to refresh
--
-- Expired members are trimmed first; only members still present are
-- refreshed (ZADD XX): a call whose place already expired is not brought
-- back, so a refresh never adds a call the limit did not admit.
--
-- Reply (array of integers): [1] refreshed members, [2] live calls in the
-- set after the refresh, [3] Redis TIME in µs.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local refreshed = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
    refreshed = refreshed + 1
  end
end
local live = redis.call('ZCARD', KEYS[1])
if live > 0 then
  -- The key outlives its latest expiry, so idle sets vanish.
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], math.floor((tonumber(last[2]) - now) / 1000) + 1000)
end
return {refreshed, live, now}
