-- overrides.lua — the pool's live limit overrides (PUT /api/v1/limits).
--
-- KEYS[1]   hash: field = "scope/name", value = the override (opaque to
--           the script: cpsguard's own encoding)
-- KEYS[2]   sorted set: member = field, score = expiry, integer ms of Redis
--           TIME (same hash tag as KEYS[1])
-- ARGV[1]   op: "set", "del" or "list"
-- ARGV[2]   field (set, del)
-- ARGV[3]   value (set; never empty)
-- ARGV[4]   ttl in ms (set; > 0)
--
-- Every op first drops the overrides whose expiry has passed. Both keys
-- expire with the latest override (PEXPIRE), so an override never outlives
-- its TTL in Redis either, even when no node is up to drop it.
--
-- Reply: array {now, field, left, value, field, left, value, ...}: now =
-- Redis TIME in ms; then, for "list", every live override with the ms it has
-- left; for "set", the override it replaced (if any); for "del", the one it
-- removed (if any).
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local vals, exp = KEYS[1], KEYS[2]
local op = ARGV[1]

for _, f in ipairs(redis.call('ZRANGEBYSCORE', exp, '-inf', now)) do
  redis.call('HDEL', vals, f)
end
redis.call('ZREMRANGEBYSCORE', exp, '-inf', now)

local reply = {now}
local function add(f)
  local v = redis.call('HGET', vals, f)
  local s = redis.call('ZSCORE', exp, f)
  if v and s then
    reply[#reply + 1] = f
    reply[#reply + 1] = tonumber(s) - now
    reply[#reply + 1] = v
  end
end

if op == 'list' then
  local all = redis.call('ZRANGE', exp, 0, -1)
  for _, f in ipairs(all) do add(f) end
  return reply
end

local f = ARGV[2]
if f == nil or f == '' then
  return redis.error_reply('ERR overrides.lua: field required')
end
add(f)
if op == 'set' then
  local ttl = tonumber(ARGV[4])
  if ARGV[3] == nil or ARGV[3] == '' or ttl == nil or ttl <= 0 then
    return redis.error_reply('ERR overrides.lua: set needs a value and a ttl > 0')
  end
  redis.call('HSET', vals, f, ARGV[3])
  redis.call('ZADD', exp, now + math.floor(ttl), f)
elseif op == 'del' then
  redis.call('HDEL', vals, f)
  redis.call('ZREM', exp, f)
else
  return redis.error_reply('ERR overrides.lua: unknown op')
end

local last = redis.call('ZRANGE', exp, -1, -1, 'WITHSCORES')
if #last == 0 then
  redis.call('DEL', vals, exp)
else
  local left = tonumber(last[2]) - now
  if left < 1 then left = 1 end
  redis.call('PEXPIRE', vals, left)
  redis.call('PEXPIRE', exp, left)
end
return reply
