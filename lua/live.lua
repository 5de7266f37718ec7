-- live.lua — the pool's live calls (GET /api/v1/calls).
--
-- KEYS[1]   hash: field = call id (cpsguard's, one per call attempt),
--           value = the call (cpsguard's own encoding, opaque here)
-- KEYS[2]   sorted set: member = call id, score = expiry, integer ms of
--           Redis TIME (same hash tag as KEYS[1])
-- ARGV[1]   op: "put", "del" or "list"
-- put:      ARGV[2] ttl in ms (> 0), then pairs ARGV[3..]: id, value
--           (never empty); each entry expires ttl from now
-- del:      ARGV[2..] ids
--
-- Every op first drops the entries whose expiry has passed (a node that
-- died stops refreshing its calls, which vanish within the ttl). Both keys
-- expire with the latest entry, so an idle pool leaves nothing behind.
--
-- Reply: array {now, n} for put and del (n: entries written or removed);
-- {now, id, value, id, value, ...} for list, every live entry by expiry.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local vals, exp = KEYS[1], KEYS[2]
local op = ARGV[1]

local old = redis.call('ZRANGEBYSCORE', exp, '-inf', now)
for i = 1, #old, 500 do
  redis.call('HDEL', vals, unpack(old, i, math.min(i + 499, #old)))
end
redis.call('ZREMRANGEBYSCORE', exp, '-inf', now)

if op == 'list' then
  local reply = {now}
  local ids = redis.call('ZRANGE', exp, 0, -1)
  for i = 1, #ids, 500 do
    local chunk = {unpack(ids, i, math.min(i + 499, #ids))}
    local vs = redis.call('HMGET', vals, unpack(chunk))
    for j = 1, #chunk do
      if vs[j] then
        reply[#reply + 1] = chunk[j]
        reply[#reply + 1] = vs[j]
      end
    end
  end
  return reply
end

local n = 0
if op == 'put' then
  local ttl = tonumber(ARGV[2])
  if ttl == nil or ttl <= 0 or #ARGV % 2 ~= 0 then
    return redis.error_reply('ERR live.lua: put needs a ttl > 0 and id, value pairs')
  end
  for i = 3, #ARGV, 2 do
    if ARGV[i] == '' or ARGV[i + 1] == '' then
      return redis.error_reply('ERR live.lua: empty id or value')
    end
    redis.call('HSET', vals, ARGV[i], ARGV[i + 1])
    redis.call('ZADD', exp, now + math.floor(ttl), ARGV[i])
    n = n + 1
  end
elseif op == 'del' then
  for i = 2, #ARGV do
    n = n + redis.call('ZREM', exp, ARGV[i])
    redis.call('HDEL', vals, ARGV[i])
  end
else
  return redis.error_reply('ERR live.lua: unknown op')
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
return {now, n}
