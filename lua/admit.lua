-- admit.lua — rolling-window admission over N buckets in one atomic step.
--
-- KEYS[i]      sorted set of bucket i: members = admitted calls, score = admission time (integer µs)
-- ARGV[1]      member: unique id of the call attempt (Call-ID + top Via branch)
-- ARGV[2i]     limit of bucket i (integer, calls in the window)
-- ARGV[2i+1]   window of bucket i (integer µs, > 0)
--
-- Clock: Redis TIME in integer µs. An entry scored t is in the window at now
-- while t > now - window; it leaves at exactly t + window.
--
-- Reply (array of integers):
--   [1] admitted      1 = admitted (and added to every bucket), 0 = refused
--   [2] refused       0-based index of the first bucket at its limit, -1 when admitted
--   [3] duplicate     1 = member was already in a bucket: admitted, nothing added
--   [4] now_us        Redis TIME in µs
--   [5] retry_us      when refused: µs until the refusing bucket has room; else 0
--   [5+i] count_i     calls in bucket i's window after the decision
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local member = ARGV[1]
local n = #KEYS

local counts = {}
local duplicate = false
for i = 1, n do
  local w = tonumber(ARGV[2 * i + 1])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - w)
  counts[i] = redis.call('ZCARD', KEYS[i])
  if not duplicate and redis.call('ZSCORE', KEYS[i], member) then
    duplicate = true
  end
end

local reply = {1, -1, 0, now, 0}
if duplicate then
  reply[3] = 1
  for i = 1, n do reply[5 + i] = counts[i] end
  return reply
end

for i = 1, n do
  local limit = tonumber(ARGV[2 * i])
  if counts[i] >= limit then
    local w = tonumber(ARGV[2 * i + 1])
    -- The entry that must leave before there is room: the (count-limit+1)-th oldest.
    local retry = w
    if limit > 0 then
      local e = redis.call('ZRANGE', KEYS[i], counts[i] - limit, counts[i] - limit, 'WITHSCORES')
      if e[2] then retry = tonumber(e[2]) + w - now end
    end
    if retry < 0 then retry = 0 end
    reply[1] = 0
    reply[2] = i - 1
    reply[5] = retry
    for j = 1, n do reply[5 + j] = counts[j] end
    return reply
  end
end

for i = 1, n do
  local w = tonumber(ARGV[2 * i + 1])
  redis.call('ZADD', KEYS[i], now, member)
  redis.call('PEXPIRE', KEYS[i], math.ceil(w / 1000) + 1000)
  reply[5 + i] = counts[i] + 1
end
return reply
