-- pace.lua — reserve the next send slot of a carrier (leaky bucket), atomically.
--
-- KEYS[1]      sorted set of reserved slots: member = call, score = slot time (integer µs)
-- ARGV[1]      member: unique id of the call attempt
-- ARGV[2]      interval between slots (integer µs, > 0)
-- ARGV[3]      max_wait: longest acceptable wait (integer µs, >= 0)
--
-- slot = max(now, last + interval). When slot - now > max_wait nothing is
-- reserved. Slots older than now - max(1 s, interval) are trimmed; they can no
-- longer move the next slot, so the last slot that matters is always kept.
-- A member that already holds a slot keeps it (retransmissions are idempotent).
--
-- Reply (array of integers):
--   [1] ok        1 = slot reserved (or already held), 0 = refused, nothing reserved
--   [2] wait_us   slot - now (the wait it would have been when refused); >= 0
--   [3] now_us    Redis TIME in µs
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local member = ARGV[1]
local interval = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])

local keep = interval
if keep < 1000000 then keep = 1000000 end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - keep)

local held = redis.call('ZSCORE', key, member)
if held then
  local wait = tonumber(held) - now
  if wait < 0 then wait = 0 end
  return {1, wait, now}
end

local slot = now
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then
  local next_slot = tonumber(last[2]) + interval
  if next_slot > slot then slot = next_slot end
end

local wait = slot - now
if wait > max_wait then
  return {0, wait, now}
end
redis.call('ZADD', key, slot, member)
redis.call('PEXPIRE', key, math.ceil((wait + keep) / 1000) + 1000)
return {1, wait, now}
