-- pause.lua — a carrier's Retry-After pause, pool-wide: set, read, end.
--
-- KEYS[1]      the carrier's sorted set of reserved slots (see pace.lua)
-- KEYS[2]      the pause: a hash of u = end of the span (Redis TIME µs),
--              s = when the pause began, r = why (text), p = the member
--              holding the half-open probe ('' = none), pc = when that
--              claim ends (µs)
-- ARGV[1]      op:
--   set  ARGV[2] span_us (> 0), ARGV[3] reason, ARGV[4] keep_us (>= 0):
--        pause for span from now. A span ending later than the pause in
--        force replaces it (and any probe claim); one ending sooner changes
--        nothing. Every slot still in the future is removed: the calls
--        holding them must not go (each node skips them before the send),
--        and the call that tries the carrier after the span must not queue
--        behind them. The hash lives keep_us past the span's end.
--   get  read only.
--   done ARGV[2] member, ARGV[3] ok (1/0): the half-open probe call of
--        member ended: ok ends the pause, not ok frees the claim (the next
--        call tries). Nothing changes unless member holds the claim.
--   open ARGV[2] min_age_us: the carrier answered a probe (OPTIONS) sent
--        after the pause began (it is at least min_age_us old): the span
--        ends now, so the pause is half-open and one call tries the carrier.
--   lift an operator ends the pause.
--
-- Reply (array): [1] paused (1 when a pause is in force after the op, span
-- running or half-open), [2] until_us, [3] since_us, [4] now_us, [5] reason
-- (string), [6] probing (1 when a probe claim is live), [7] changed (1 when
-- the op changed the pause). For done ok and lift, [2], [3] and [5] are the
-- pause that ended.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local pkey = KEYS[2]
local op = ARGV[1]

local h = redis.call('HMGET', pkey, 'u', 's', 'r', 'p', 'pc')
local exists = h[1] ~= false
local until_us, since_us, reason = tonumber(h[1]) or 0, tonumber(h[2]) or 0, h[3] or ''
local holder, claim_end = h[4] or '', tonumber(h[5]) or 0

local function reply(paused, changed)
  local probing = 0
  if paused == 1 and holder ~= '' and claim_end > now then probing = 1 end
  return {paused, until_us, since_us, now, reason, probing, changed}
end

local state = 0
if exists then state = 1 end

if op == 'set' then
  local span = tonumber(ARGV[2])
  local keep = tonumber(ARGV[4])
  local new_until = now + span
  redis.call('ZREMRANGEBYSCORE', key, string.format('(%d', now), '+inf')
  if exists and until_us >= new_until then
    return reply(1, 0)
  end
  if not exists then since_us = now end
  until_us, reason, holder, claim_end = new_until, ARGV[3], '', 0
  redis.call('HSET', pkey, 'u', until_us, 's', since_us, 'r', reason, 'p', '', 'pc', 0)
  redis.call('PEXPIRE', pkey, math.ceil((span + keep) / 1000) + 1000)
  return reply(1, 1)
elseif op == 'get' then
  return reply(state, 0)
elseif op == 'done' then
  if not exists or holder == '' or holder ~= ARGV[2] then
    return reply(state, 0)
  end
  if ARGV[3] == '1' then
    redis.call('DEL', pkey)
    holder = ''
    return reply(0, 1)
  end
  holder, claim_end = '', 0
  redis.call('HSET', pkey, 'p', '', 'pc', 0)
  return reply(1, 1)
elseif op == 'open' then
  if not exists or now >= until_us or now - since_us < tonumber(ARGV[2]) then
    return reply(state, 0)
  end
  until_us = now
  redis.call('HSET', pkey, 'u', until_us)
  return reply(1, 1)
elseif op == 'lift' then
  if not exists then
    return reply(0, 0)
  end
  redis.call('DEL', pkey)
  holder = ''
  return reply(0, 1)
end
return redis.error_reply('pause.lua: unknown op ' .. tostring(op))
