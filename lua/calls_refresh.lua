-- calls_refresh.lua — keep the places of live calls in one set (batched).
--
-- KEYS[1]      sorted set of one place (see calls_occupy.lua)
-- ARGV[1]      ttl: integer µs from now the places live (> 0)
-- ARGV[2..]    members to refresh: calls the node holds live
--
-- Expired members are trimmed first. Every named member then expires ttl
-- from now. A member that is missing is added back: the node names only
-- calls it holds live (taken while Redis was out of use, or lost with a
-- Redis restart or a failover), and a set that forgot a live call would let
-- the pool admit more calls than its limit. Adding back admits nothing new:
-- it makes the set count the calls that exist.
--
-- Reply (array of integers): [1] members extended, [2] members added back,
-- [3] live calls in the set after the refresh, [4] Redis TIME in µs.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local extended, restored = 0, 0
for i = 2, #ARGV do
  if redis.call('ZADD', KEYS[1], now + ttl, ARGV[i]) == 1 then
    restored = restored + 1
  else
    extended = extended + 1
  end
end
local live = redis.call('ZCARD', KEYS[1])
if live > 0 then
  -- The key outlives its latest expiry, so idle sets vanish.
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], math.floor((tonumber(last[2]) - now) / 1000) + 1000)
end
return {extended, restored, live, now}
