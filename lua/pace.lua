-- pace.lua — reserve the next send slot of a carrier (leaky bucket), atomically.
--
-- KEYS[1]      sorted set of reserved slots: member = call, score = slot time (integer µs)
-- KEYS[2]      the carrier's pause (a hash, see pause.lua)
-- ARGV[1]      member: unique id of the call attempt
-- ARGV[2]      interval between slots (integer µs, > 0)
-- ARGV[3]      max_wait: longest acceptable wait (integer µs, >= 0)
-- ARGV[4]      claim_us: how long a half-open probe claim lasts (integer µs, > 0)
--
-- A paused carrier (pause.lua) gets no slot: the call is refused at once
-- with state 1, not queued behind the pause, so it goes to the next
-- carrier of its route. Once the pause's span is over it is half-open: the
-- first call that gets a slot claims the probe (state 2, the pause's p and
-- pc fields) and every other call is refused with state 1 until the probe
-- is done (pause.lua done), its claim expires (claim_us after it was taken)
-- or the carrier is paused again. The probe holder asking again (a
-- retransmission, a slot taken again after a late wake) keeps its claim.
--
-- Otherwise slot = max(now, last + interval). When slot - now > max_wait
-- nothing is reserved. Slots older than now - max(1 s, interval) are
-- trimmed; they can no longer move the next slot, so the last slot that
-- matters is always kept. A member that already holds a slot keeps it
-- (retransmissions are idempotent).
--
-- Reply (array of integers):
--   [1] ok        1 = slot reserved (or already held), 0 = refused, nothing reserved
--   [2] wait_us   slot - now (the wait it would have been when refused); >= 0;
--                 for a pause, what is left of its span
--   [3] now_us    Redis TIME in µs
--   [4] state     0 = no pause, 1 = refused: paused (or half-open with the
--                 probe taken), 2 = granted as the half-open probe
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local pkey = KEYS[2]
local member = ARGV[1]
local interval = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local claim = tonumber(ARGV[4])

local half_open = false
local pz = redis.call('HMGET', pkey, 'u', 'p', 'pc')
if pz[1] then
  local until_us = tonumber(pz[1])
  if now < until_us then
    return {0, until_us - now, now, 1}
  end
  local holder, claim_end = pz[2] or '', tonumber(pz[3]) or 0
  if holder ~= '' and holder ~= member and claim_end > now then
    return {0, 0, now, 1}
  end
  half_open = true
end

local function take_probe()
  redis.call('HSET', pkey, 'p', member, 'pc', now + claim)
  local ttl = redis.call('PTTL', pkey)
  local want = math.ceil(claim / 1000) + 600000
  if ttl < want then redis.call('PEXPIRE', pkey, want) end
end

local keep = interval
if keep < 1000000 then keep = 1000000 end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - keep)

local held = redis.call('ZSCORE', key, member)
if held then
  local wait = tonumber(held) - now
  if wait < 0 then wait = 0 end
  if half_open then
    take_probe()
    return {1, wait, now, 2}
  end
  return {1, wait, now, 0}
end

local slot = now
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then
  local next_slot = tonumber(last[2]) + interval
  if next_slot > slot then slot = next_slot end
end

local wait = slot - now
if wait > max_wait then
  return {0, wait, now, 0}
end
redis.call('ZADD', key, slot, member)
redis.call('PEXPIRE', key, math.ceil((wait + keep) / 1000) + 1000)
if half_open then
  take_probe()
  return {1, wait, now, 2}
end
return {1, wait, now, 0}
