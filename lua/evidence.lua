-- evidence.lua — which peers called a carrier, and which of them it gave
-- overload answers, lately, pool-wide.
--
-- KEYS[1]      sorted set of the carrier's callers: member = peer, score =
--              Redis TIME µs of its last call
-- KEYS[2]      sorted set of the peers the carrier answered with an
--              overload answer: member = peer, score = TIME µs of the last
-- ARGV[1]      peer
-- ARGV[2]      overload: 1 = this answer was an overload answer, 0 = a call
-- ARGV[3]      callers_us: how long a peer counts as a caller (> 0)
-- ARGV[4]      overload_us: how recent an overload answer counts (> 0)
--
-- Every call records its peer as a caller; an overload answer also as
-- overloaded. Entries older than their window are removed, so each set
-- holds at most the configured peers, and each expires with its window.
--
-- Reply (array of integers):
--   [1] callers     peers that called the carrier within callers_us
--   [2] overloaded  peers given an overload answer within overload_us
--   [3] now_us      Redis TIME in µs
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local peer = ARGV[1]
local callers_us = tonumber(ARGV[3])
local overload_us = tonumber(ARGV[4])

redis.call('ZADD', KEYS[1], now, peer)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now - callers_us))
redis.call('PEXPIRE', KEYS[1], math.ceil(callers_us / 1000) + 1000)
if ARGV[2] == '1' then
  redis.call('ZADD', KEYS[2], now, peer)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('(%d', now - overload_us))
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PEXPIRE', KEYS[2], math.ceil(overload_us / 1000) + 1000)
end
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), now}
