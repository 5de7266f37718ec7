-- calls_occupy.lua — take a concurrent-call place in N sets at once (all or none).
--
-- KEYS[i]      sorted set of place i: members = live calls, score = expiry (Redis TIME, integer µs)
-- ARGV[1]      member: unique id of the call attempt
-- ARGV[2]      ttl: integer µs the places live unless refreshed (> 0)
-- ARGV[2+i]    limit of place i (integer, > 0: calls at once)
--
-- A member scored e is live at now while e > now; expired members are trimmed
-- first. The member is added (score now + ttl) to every set only when every
-- set is under its limit. A member already live in a set is a duplicate
-- (retransmission): its places are refreshed, nothing is counted twice.
--
-- Reply (array of integers):
--   [1] admitted      1 = placed in every set (or duplicate), 0 = refused
--   [2] refused       0-based index of the first full set, -1 when admitted
--   [3] duplicate     1 = member was already live in a set
--   [4] now_us        Redis TIME in µs
--   [4+i] count_i     live calls in set i after the decision
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local member = ARGV[1]
local ttl = tonumber(ARGV[2])
local n = #KEYS

-- keep makes a set outlive its latest expiry, so idle sets vanish.
local function keep(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, math.floor((tonumber(last[2]) - now) / 1000) + 1000)
  end
end

local counts = {}
local duplicate = false
for i = 1, n do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  counts[i] = redis.call('ZCARD', KEYS[i])
  if not duplicate and redis.call('ZSCORE', KEYS[i], member) then
    duplicate = true
  end
end

local reply = {1, -1, 0, now}
if duplicate then
  reply[3] = 1
  for i = 1, n do
    redis.call('ZADD', KEYS[i], 'XX', now + ttl, member)
    keep(KEYS[i])
    reply[4 + i] = counts[i]
  end
  return reply
end

for i = 1, n do
  if counts[i] >= tonumber(ARGV[2 + i]) then
    reply[1] = 0
    reply[2] = i - 1
    for j = 1, n do reply[4 + j] = counts[j] end
    return reply
  end
end

for i = 1, n do
  redis.call('ZADD', KEYS[i], now + ttl, member)
  keep(KEYS[i])
  reply[4 + i] = counts[i] + 1
end
return reply
