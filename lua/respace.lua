-- respace.lua — a carrier's limit changed on a node: respace its queue, once
-- for the pool.
--
-- KEYS[1]      the carrier's sorted set of reserved slots (see pace.lua)
-- KEYS[2]      hash: i = the interval (µs) the carrier's slots were last
--              respaced for, t = Redis TIME µs of the last respace (0: none
--              remembered)
-- ARGV[1]      interval: the carrier's interval between slots from now on
--              (integer µs, > 0)
-- ARGV[2]      lowered: 1 = the node's limit went down, 0 = it went up
-- ARGV[3]      keep: how long the hash lives after a change (integer µs, > 0)
--
-- Slots are spaced when they are reserved. A limit lowered by a reload or a
-- live override spaces the reservations made from then on, but the slots
-- already in the future were spaced for the old one: their calls would
-- reach the carrier at the old rate for up to max_wait. A lowered limit
-- therefore removes every slot still in the future, as an adaptive
-- carrier's decrease does (rate.lua), and the calls holding them take a
-- slot again at the new interval before they send (each node compares its
-- slot's time with [1]).
--
-- Every node of a pool applies the same change, each when it reloads or
-- sees the override: the first one respaces, the others find the interval
-- in KEYS[2] and only learn the time of that respace ([3] = 0). Removing the
-- queue again for each node would make every waiting call of the pool take
-- a slot again once per node. A raised limit removes nothing: it records
-- its interval, so that a later return to the lower one respaces again.
--
-- Reply (array of integers):
--   [1] cut_us    TIME µs of the last respace (0: none remembered)
--   [2] now_us    Redis TIME in µs
--   [3] cut       1 when this call removed the future slots, else 0
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local lowered = ARGV[2] == '1'
local keep_ms = math.ceil(tonumber(ARGV[3]) / 1000)

local h = redis.call('HMGET', KEYS[2], 'i', 't')
local last_i, last_t = tonumber(h[1]), tonumber(h[2]) or 0
if last_t > now then last_t = 0 end
if last_i == interval then
  return {last_t, now, 0}
end
if not lowered then
  redis.call('HSET', KEYS[2], 'i', string.format('%d', interval), 't', string.format('%d', last_t))
  redis.call('PEXPIRE', KEYS[2], keep_ms)
  return {last_t, now, 0}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], string.format('(%d', now), '+inf')
redis.call('HSET', KEYS[2], 'i', string.format('%d', interval), 't', string.format('%d', now))
redis.call('PEXPIRE', KEYS[2], keep_ms)
return {now, now, 1}
