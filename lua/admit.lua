-- admit.lua — admission over N buckets in one atomic step: all or nothing.
-- A bucket is a rolling window or a token bucket.
--
-- KEYS[i]      i = 1..N: sorted set of bucket i, members = admitted calls,
--              score = admission time (integer µs). A rolling window counts
--              them; a token bucket only remembers them for its window, to
--              recognise a duplicate.
-- KEYS[N+j]    hash of the j-th token bucket (in bucket order), fields
--              tokens (integer µtokens, 1 token = 1000000) and last (the
--              Redis TIME in µs the level was computed at)
-- ARGV[1]      member: unique id of the call attempt (Call-ID + top Via branch)
-- ARGV[4i-2]   bucket i: limit (rolling window: calls in the window) or
--              capacity (token bucket: tokens, the burst)
-- ARGV[4i-1]   bucket i: window (integer µs, > 0)
-- ARGV[4i]     bucket i: rate; 0 = rolling window, > 0 = token bucket
--              refilled at this many µtokens per second (cps × 1000000)
-- ARGV[4i+1]   bucket i: what it does with a call over its limit:
--              0 = refuse it (nothing is counted anywhere),
--              1 = shadow: let it through, not counted in this bucket,
--              2 = count: let it through and count it here anyway (a
--                  window holds it beyond its limit; a token bucket gives
--                  it a token when one is left and is never put in debt)
--
-- Clock: Redis TIME in integer µs. A window entry scored t is in the window
-- at now while t > now - window; it leaves at exactly t + window. A token
-- bucket's level at now is min(capacity, tokens + floor((now - last) ×
-- rate / 1e6)), computed in integers that stay below 2^53 (rate split into
-- whole µtokens per µs and a remainder); an absent hash is a full bucket,
-- and a level above a lowered capacity is clamped, never reset. Every
-- number handed to Redis is an integer formatted with %d (as pace.lua).
--
-- Reply (array of integers):
--   [1] admitted      1 = admitted (and counted in every bucket but a
--                     shadowed one over its limit), 0 = refused
--   [2] refused       0-based index of the first refusing bucket over its
--                     limit, -1 when admitted
--   [3] duplicate     1 = member was already in a bucket: admitted, nothing added
--   [4] now_us        Redis TIME in µs
--   [5] retry_us      when refused: µs until the refusing bucket has room; else 0
--   [5+i] count_i     bucket i after the decision: calls in its window, or
--                     tokens in use (capacity - whole tokens left)
--   [5+N+i] over_i    1 = bucket i was over its limit (it refused the call,
--                     or let it through as shadow or count), else 0
if redis.replicate_commands then redis.replicate_commands() end

local U = 1000000
local fmt = string.format
local t = redis.call('TIME')
-- TIME's two strings, converted by the arithmetic (tonumber converts twice).
local now = t[1] * U + t[2]
local member = ARGV[1]
local n = (#ARGV - 1) / 4
if n < 1 or n ~= math.floor(n) then
  return redis.error_reply('admit.lua: ARGV must be member and 4 values per bucket')
end

-- level returns a token bucket's level and its time at now, without writing.
local function level(h, cap, rate)
  local tokens, last = tonumber(h[1]), tonumber(h[2])
  if not tokens or not last then return cap, now end
  if now > last then
    local e = now - last
    local es = math.floor(e / U)
    if es * rate >= cap - tokens then return cap, now end
    local ef = e - es * U
    local q = math.floor(rate / U)
    tokens = tokens + es * rate + ef * q + math.floor(ef * (rate - q * U) / U)
    last = now
  end
  if tokens > cap then tokens = cap end
  return tokens, last
end

-- Each per-bucket table is built with room for 4 buckets: filled one
-- by one from empty, each would be rehashed at every power of two.
local limit, window, rate, mode = {nil, nil, nil, nil}, {nil, nil, nil, nil}, {nil, nil, nil, nil}, {nil, nil, nil, nil}
local counts, over = {nil, nil, nil, nil}, {nil, nil, nil, nil}
local state, levels, lasts = {}, {}, {}
local duplicate = false
local tb = 0
for i = 1, n do
  limit[i] = tonumber(ARGV[4 * i - 2])
  window[i] = tonumber(ARGV[4 * i - 1])
  rate[i] = tonumber(ARGV[4 * i])
  mode[i] = tonumber(ARGV[4 * i + 1])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', fmt('%d', now - window[i]))
  if not duplicate and redis.call('ZSCORE', KEYS[i], member) then
    duplicate = true
  end
  if rate[i] > 0 then
    tb = tb + 1
    state[i] = KEYS[n + tb]
    levels[i], lasts[i] = level(redis.call('HMGET', state[i], 'tokens', 'last'), limit[i] * U, rate[i])
    counts[i] = limit[i] - math.floor(levels[i] / U)
  else
    counts[i] = redis.call('ZCARD', KEYS[i])
  end
end
if #KEYS ~= n + tb then
  return redis.error_reply('admit.lua: KEYS must be one per bucket and one hash per token bucket')
end

local reply = {1, -1, 0, now, 0, nil, nil, nil, nil, nil, nil, nil, nil}
for i = 1, n do
  if rate[i] > 0 then
    over[i] = levels[i] < U
  else
    over[i] = counts[i] >= limit[i]
  end
  reply[5 + n + i] = over[i] and 1 or 0
end
if duplicate then
  reply[3] = 1
  for i = 1, n do
    reply[5 + i] = counts[i]
    reply[5 + n + i] = 0
  end
  return reply
end

for i = 1, n do
  if over[i] and mode[i] == 0 then
    local retry
    if rate[i] > 0 then
      retry = math.ceil((U - levels[i]) * U / rate[i])
    else
      -- The entry that must leave before there is room: the (count-limit+1)-th oldest.
      retry = window[i]
      if limit[i] > 0 then
        local r = fmt('%d', counts[i] - limit[i])
        local e = redis.call('ZRANGE', KEYS[i], r, r, 'WITHSCORES')
        if e[2] then retry = tonumber(e[2]) + window[i] - now end
      end
      if retry < 0 then retry = 0 end
    end
    reply[1] = 0
    reply[2] = i - 1
    reply[5] = retry
    for j = 1, n do reply[5 + j] = counts[j] end
    return reply
  end
end

local nows = fmt('%d', now)
for i = 1, n do
  if over[i] and mode[i] == 1 then
    -- Shadowed: the call goes on, this bucket does not count it.
    reply[5 + i] = counts[i]
  else
    redis.call('ZADD', KEYS[i], nows, member)
    redis.call('PEXPIRE', KEYS[i], fmt('%d', math.ceil(window[i] / 1000) + 1000))
    if rate[i] > 0 then
      local cap = limit[i] * U
      local tokens = levels[i]
      if tokens >= U then tokens = tokens - U end
      redis.call('HSET', state[i], 'tokens', fmt('%d', tokens), 'last', fmt('%d', lasts[i]))
      -- Idle until full, the hash says nothing an absent one would not.
      redis.call('PEXPIRE', state[i], fmt('%d', math.ceil((cap - tokens) * 1000 / rate[i]) + 1000))
      reply[5 + i] = limit[i] - math.floor(tokens / U)
    else
      reply[5 + i] = counts[i] + 1
    end
  end
end
return reply
