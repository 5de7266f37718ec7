-- heartbeat.lua — announce one node and count the live ones.
--
-- KEYS[1]   sorted set of nodes: member = node id, score = last beat (integer ms, Redis TIME)
-- ARGV[1]   node id
-- ARGV[2]   ttl in ms (> 0): a node whose last beat is older is not live
--
-- Reply: integer, the live nodes including this one.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
