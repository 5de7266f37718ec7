-- pace.lua — reserve the next send slot of a carrier (leaky bucket), atomically,
-- shared fairly among the carrier's callers when the call names a share.
--
-- KEYS[1]      sorted set of reserved slots: member = call, score = slot time (integer µs)
-- KEYS[2]      the carrier's pause (a hash, see pause.lua)
-- KEYS[3]      the carrier's fair shares (a hash): sum = the weights of the
--              shares waiting, booked = bookings outstanding, v:<share> = the
--              share's next turn (µs), w:<share> = its weight, d:<share> = how
--              far its turns have slipped in all (µs), m:<member> = "charge
--              start slip state share" of a fair call (its charge, its turn,
--              d:<share> when it booked; state b: booked, r: slot)
-- KEYS[4]      expiries of the fair state (a sorted set, µs): s:<share> until
--              the share stops counting as waiting, m:<member> until its
--              record is forgotten
-- ARGV[1]      member: unique id of the call attempt
-- ARGV[2]      interval between slots (integer µs, > 0)
-- ARGV[3]      max_wait: longest acceptable wait (integer µs, >= 0)
-- ARGV[4]      claim_us: how long a half-open probe claim lasts (integer µs, > 0)
-- ARGV[5]      share: '' or absent = none (first come, first served; KEYS[3] and KEYS[4]
--              are not touched, ARGV[6..9] not read and may be left off), else
--              the share's name
-- ARGV[6]      the share's weight (integer, 1-1000)
-- ARGV[7]      lead (integer µs, > 0): how far from its turn a fair call's slot may be
-- ARGV[8]      record keep (integer µs): how long past max_wait a fair record lives
-- ARGV[9]      the cap of the weights' sum (integer)
--
-- A paused carrier (pause.lua) gets no slot: the call is refused at once
-- with state 1, not queued behind the pause, so it goes to the next
-- carrier of its route. Once the pause's span is over it is half-open: the
-- first call that gets a slot claims the probe (state 2, the pause's p and
-- pc fields) and every other call is refused with state 1 until the probe
-- is done (pause.lua done), its claim expires (claim_us after it was taken)
-- or the carrier is paused again. The probe holder asking again (a
-- retransmission, a slot taken again after a late wake) keeps its claim.
-- A half-open carrier is not shared: its probe goes first come, first served.
--
-- Without a share, slot = max(now, last + interval). When slot - now >
-- max_wait nothing is reserved. Slots older than now - max(1 s, interval)
-- are trimmed; they can no longer move the next slot, so the last slot that
-- matters is always kept. A member that already holds a slot keeps it
-- (retransmissions are idempotent).
--
-- With a share, the carrier's slots are shared by weight among the shares
-- waiting for it (start-time fair queueing on real time, each share a lane):
--   * a share's turns are period = interval * sum / weight apart (sum: the
--     weights of the shares waiting, itself included, capped); v:<share>
--     is its next one. A share waits from its call until one period after
--     its last turn has passed; then its state expires (sum goes down).
--   * a call whose share's next turn is at most one period ahead is within
--     its share: it takes the first free slot from now (a slot at least
--     interval from every other) and moves the turn on by one period;
--   * a call beyond its share takes a slot that is free right now if there
--     is one (nobody else wants it: work-conserving, and not charged to its
--     share); else it books its share's next turn (state 3, the wait is until
--     lead before the turn) and moves the turn on, unless the turn plus one
--     interval (room for a neighbour's slot) is beyond max_wait (refused,
--     nothing booked);
--   * a call that holds a booking (or a slot a pause or a rate cut removed)
--     takes, when it asks again, the first free slot from its turn (moved
--     by what its share's turns slipped since it booked; now at the
--     earliest) if that is at most lead after it. A turn more than lead
--     ahead is booked again, until lead before it; so is a slot up to an
--     interval after the turn (a neighbour took the one at the turn). A slot
--     further away (calls within their share took the turn's) makes the
--     share's turns slip: this turn and every later one of the share move
--     by the difference, so the share's calls do not push one another from
--     slot to slot. Taking the slot only at the turn keeps every slot taken
--     within lead of now, so a call within its share finds one within about
--     an interval instead of behind another share's backlog.
-- Every slot is at least interval from every other, however it was taken:
-- at most the carrier's cps in any rolling second. A record (m:<member>)
-- keeps each fair call's share, turn and charge (the period) until max_wait
-- + record keep after the call, so release.lua can give the turn back; a
-- booking whose caller never came back is given back when its record
-- expires. Each call forgets at most 64 expired entries (amortised: each is
-- added once). Every number handed to Redis (a command's argument, a field
-- written) is an integer formatted with %d: Lua's tostring keeps only 14
-- digits, and a Lua number given to redis.call is formatted with %.17g,
-- several times the cost of %d (the same string for an integer below 2^53).
--
-- Reply (array of integers):
--   [1] ok        1 = slot reserved (or already held) or turn booked, 0 = refused, nothing reserved
--   [2] wait_us   slot - now (the wait it would have been when refused); >= 0;
--                 for a pause, what is left of its span; for a booking, until
--                 the call must ask again
--   [3] now_us    Redis TIME in µs
--   [4] state     0 = no pause, 1 = refused: paused (or half-open with the
--                 probe taken), 2 = granted as the half-open probe, 3 = booked
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
-- TIME's two strings, converted by the arithmetic (tonumber converts twice).
local now = t[1] * 1000000 + t[2]
local fmt = string.format
local key = KEYS[1]
local pkey = KEYS[2]
local fkey = KEYS[3]
local xkey = KEYS[4]
local member = ARGV[1]
local interval = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local share = ARGV[5] or ''

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
  local claim = tonumber(ARGV[4])
  redis.call('HSET', pkey, 'p', member, 'pc', fmt('%d', now + claim))
  local ttl = redis.call('PTTL', pkey)
  local want = math.ceil(claim / 1000) + 600000
  if ttl < want then redis.call('PEXPIRE', pkey, fmt('%d', want)) end
end

local keep = interval
if keep < 1000000 then keep = 1000000 end
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now - keep))

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

-- The record of a fair call, or nil.
local function record(m)
  local r = redis.call('HGET', fkey, 'm:' .. m)
  if not r then return nil end
  local charge, start, d0, state, sh = string.match(r, '^(%d+) (%d+) (%d+) (%a) (.+)$')
  if not charge then return nil end
  return {charge = tonumber(charge), start = tonumber(start), d0 = tonumber(d0), state = state, share = sh}
end

-- Forget m's record, giving its share the turn back when refund.
local function forget(m, rec, refund)
  if refund then
    local v = tonumber(redis.call('HGET', fkey, 'v:' .. rec.share))
    if v then redis.call('HSET', fkey, 'v:' .. rec.share, fmt('%d', v - rec.charge)) end
  end
  if rec.state == 'b' then redis.call('HINCRBY', fkey, 'booked', '-1') end
  redis.call('HDEL', fkey, 'm:' .. m)
  redis.call('ZREM', xkey, 'm:' .. m)
end

if share ~= '' and half_open then
  local rec = record(member)
  if rec then forget(member, rec, true) end
  share = ''
end

if share == '' then
  local slot = now
  local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if last[2] then
    local next_slot = tonumber(last[2]) + interval
    if next_slot > slot then slot = next_slot end
  end

  local wait = slot - now
  if wait > max_wait then
    return {0, wait, now, 0}
  end
  redis.call('ZADD', key, fmt('%d', slot), member)
  redis.call('PEXPIRE', key, fmt('%d', math.ceil((wait + keep) / 1000) + 1000))
  if half_open then
    take_probe()
    return {1, wait, now, 2}
  end
  return {1, wait, now, 0}
end

-- Fair share. (Its arguments are read only here: each tonumber costs.)

local weight = tonumber(ARGV[6]) or 1
local lead = tonumber(ARGV[7]) or 0
local rkeep = tonumber(ARGV[8]) or 0
local sumcap = tonumber(ARGV[9]) or 1000000

local function extend(k, ms)
  local ttl = redis.call('PTTL', k)
  if ttl < ms then redis.call('PEXPIRE', k, fmt('%d', ms)) end
end

-- The first time from `from` at least interval from every slot. It reads
-- at most 16 slots past from, then goes after the last slot.
local function first_free(from)
  local c = from
  local xs = redis.call('ZRANGEBYSCORE', key, fmt('(%d', from - interval), '+inf', 'WITHSCORES', 'LIMIT', '0', '16')
  local n = #xs / 2
  for i = 1, n do
    local x = tonumber(xs[2 * i])
    if x > c - interval then
      if x < c + interval then
        c = x + interval
      else
        return c
      end
    end
  end
  if n == 16 then
    local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    local after = tonumber(last[2]) + interval
    if after > c then c = after end
  end
  return c
end

local function take(p)
  redis.call('ZADD', key, fmt('%d', p), member)
  extend(key, math.ceil((p - now + keep) / 1000) + 1000)
end

-- Forget what has expired: shares no longer waiting, records past their
-- keep (a booking whose caller never came back gives its turn back).
local due = redis.call('ZRANGEBYSCORE', xkey, '-inf', fmt('%d', now), 'LIMIT', '0', '64')
for _, e in ipairs(due) do
  local kind, name = string.sub(e, 1, 2), string.sub(e, 3)
  if kind == 's:' then
    local w = tonumber(redis.call('HGET', fkey, 'w:' .. name))
    if w then redis.call('HINCRBY', fkey, 'sum', fmt('%d', -w)) end
    redis.call('HDEL', fkey, 'w:' .. name, 'v:' .. name, 'd:' .. name)
    redis.call('ZREM', xkey, e)
  else
    local rec = record(name)
    if rec then
      forget(name, rec, rec.state == 'b')
    else
      redis.call('ZREM', xkey, e)
    end
  end
end

-- The share `name` counts as waiting until `till`, if that is later than
-- before; the state's keys live until max_wait + max(record keep, 2 periods).
local function waiting(name, till, period)
  local cur = redis.call('ZSCORE', xkey, 's:' .. name)
  if not cur or tonumber(cur) < till then
    redis.call('ZADD', xkey, fmt('%d', till), 's:' .. name)
  end
  local ms = math.ceil((max_wait + math.max(rkeep, 2 * period)) / 1000) + 1000
  extend(fkey, ms)
  extend(xkey, ms)
end

-- The call's turn has come (or it asks again): the first free slot from
-- its turn if close enough, else come back for it.
local function turn(rec)
  local d = tonumber(redis.call('HGET', fkey, 'd:' .. rec.share)) or 0
  local from = rec.start
  if d > rec.d0 then from = from + d - rec.d0 end
  if from < now then from = now end
  if from - now > lead then
    return {1, from - lead - now, now, 3}
  end
  local p = first_free(from)
  if p - now > max_wait then
    forget(member, rec, true)
    return {0, p - now, now, 0}
  end
  if p - from <= lead then
    take(p)
    if rec.state == 'b' then
      redis.call('HINCRBY', fkey, 'booked', '-1')
      redis.call('HSET', fkey, 'm:' .. member, fmt('%d %d %d r %s', rec.charge, rec.start, rec.d0, rec.share))
    end
    return {1, p - now, now, 0}
  end
  if p - from <= interval then
    -- A neighbour's slot: come back for the next one.
    return {1, p - lead - now, now, 3}
  end
  -- The slot at the turn is taken (by calls within their share): the
  -- share's turns slip.
  local by = p - from
  redis.call('HSET', fkey, 'd:' .. rec.share, fmt('%d', d + by))
  local v = tonumber(redis.call('HGET', fkey, 'v:' .. rec.share))
  if v then
    redis.call('HSET', fkey, 'v:' .. rec.share, fmt('%d', v + by))
    waiting(rec.share, v + by + rec.charge, rec.charge)
  end
  return {1, p - lead - now, now, 3}
end

local rec = record(member)
if rec then
  return turn(rec)
end

local wkey, vkey = 'w:' .. share, 'v:' .. share
-- The share's weight, the sum, its turn and slip in one read (the weight
-- and the sum are the only fields written before they are used: the sum
-- is then HINCRBY's reply).
local h = redis.call('HMGET', fkey, wkey, 'sum', vkey, 'd:' .. share)
local old = tonumber(h[1])
local sum = tonumber(h[2])
if not old then
  sum = redis.call('HINCRBY', fkey, 'sum', fmt('%d', weight))
  redis.call('HSET', fkey, wkey, fmt('%d', weight))
elseif old ~= weight then
  sum = redis.call('HINCRBY', fkey, 'sum', fmt('%d', weight - old))
  redis.call('HSET', fkey, wkey, fmt('%d', weight))
end
sum = sum or weight
if sum > sumcap then sum = sumcap end
if sum < weight then sum = weight end
local period = math.floor(interval * sum / weight)
local v = tonumber(h[3]) or 0
local slip = tonumber(h[4]) or 0
local start = now
if v > start then start = v end

-- Charge the call one period of its share's turns, and record it.
local function charge(state)
  local vn = start + period
  redis.call('HSET', fkey, vkey, fmt('%d', vn), 'm:' .. member, fmt('%d %d %d %s %s', period, start, slip, state, share))
  redis.call('ZADD', xkey, fmt('%d', now + max_wait + rkeep), 'm:' .. member)
  if state == 'b' then redis.call('HINCRBY', fkey, 'booked', '1') end
  waiting(share, vn + period, period)
  return {charge = period, start = start, d0 = slip, state = state, share = share}
end

local idle = math.max(v, now) + period
if start <= now + period then
  -- Within its share: the first free slot from now.
  local p = first_free(now)
  if p - now > max_wait then
    waiting(share, idle, period)
    return {0, p - now, now, 0}
  end
  take(p)
  charge('r')
  return {1, p - now, now, 0}
end
if first_free(now) == now then
  -- Beyond its share, but the carrier is free right now.
  take(now)
  waiting(share, idle, period)
  return {1, 0, now, 0}
end
if start + interval - now > max_wait then
  -- Its turn, or a slot an interval after it, beyond max_wait.
  waiting(share, idle, period)
  return {0, start + interval - now, now, 0}
end
local r = charge('b')
if start - lead <= now then
  return turn(r)
end
return {1, start - lead - now, now, 3}
