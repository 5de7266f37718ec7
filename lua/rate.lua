-- rate.lua — the effective rate of an adaptive carrier (AIMD), pool-wide.
--
-- KEYS[1]      hash: r = rate (integer milli-cps), t = Redis TIME µs up to
--              which the additive increase is counted, d = TIME µs of the
--              last decrease
-- KEYS[2]      the carrier's sorted set of reserved slots (see pace.lua)
-- ARGV[1]      max_m: the carrier's configured cps, in milli-cps (> 0)
-- ARGV[2]      min_m: the floor, in milli-cps (1 <= min_m <= max_m)
-- ARGV[3]      decrease: the factor of a decrease, in permille (1-999)
-- ARGV[4]      increase: milli-cps added per second (> 0)
-- ARGV[5]      hold_us: least time between two decreases (µs, >= 0)
-- ARGV[6]      overload: 1 = the carrier pushed back (decrease), 0 = read
--
-- The rate climbs back by `increase` per second since t, never above max_m
-- (a lower max after a reload clamps it, a higher one lets it climb). An
-- overload answer multiplies it by decrease/1000, never below min_m, at most
-- once per hold_us: the answers to calls sent at the old rate all arrive
-- together and must not cut it again and again. A decrease also removes
-- every slot still in the future: they were spaced for the old rate, and
-- the calls holding them take a slot again at the new one (each node
-- compares its slot's time with the decrease's, [4]). A rate back at max_m with
-- no decrease in the last hold_us leaves nothing to remember: the key is
-- deleted. Otherwise it lives until it would be back at max_m, plus hold_us.
--
-- Reply (array of integers):
--   [1] rate_m    the effective rate now, in milli-cps (min_m..max_m)
--   [2] now_us    Redis TIME in µs
--   [3] cut       1 when this call decreased the rate, else 0
--   [4] cut_us    TIME µs of the last decrease (0: none remembered)
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local max_m = tonumber(ARGV[1])
local min_m = tonumber(ARGV[2])
local dec = tonumber(ARGV[3])
local inc = tonumber(ARGV[4])
local hold = tonumber(ARGV[5])
local overload = tonumber(ARGV[6])

local h = redis.call('HMGET', key, 'r', 't', 'd')
local r, since, last_cut = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
if not r or not since or since > now then
  r, since = max_m, now
end
if not last_cut or last_cut > now then last_cut = 0 end

-- Additive increase: whole milli-cps gained since `since`; the time that
-- made no whole milli-cps yet is kept for the next call.
if r < max_m then
  local gained = math.floor(inc * (now - since) / 1000000)
  if gained > 0 then
    r = r + gained
    since = since + math.floor(gained * 1000000 / inc)
  end
end
if r >= max_m then r, since = max_m, now end
if r < min_m then r = min_m end

local cut = 0
if overload == 1 and now - last_cut >= hold then
  r = math.floor(r * dec / 1000)
  if r < min_m then r = min_m end
  last_cut, since, cut = now, now, 1
  redis.call('ZREMRANGEBYSCORE', KEYS[2], string.format('(%d', now), '+inf')
end

if r >= max_m and now - last_cut >= hold then
  redis.call('DEL', key)
  return {max_m, now, cut, last_cut}
end
redis.call('HSET', key, 'r', r, 't', since, 'd', last_cut)
local ttl_ms = math.ceil((max_m - r) * 1000 / inc) + math.ceil(hold / 1000) + 1000
redis.call('PEXPIRE', key, ttl_ms)
return {r, now, cut, last_cut}
