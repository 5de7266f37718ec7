-- refund.lua — undo an admission of member in N buckets of one slot (the
-- cross-slot path: a later slot refused the call): the member leaves every
-- sorted set, and each token bucket that had admitted it gets its token back.
--
-- KEYS, ARGV    as admit.lua (ARGV[1] the member), with 3 values per bucket:
--               limit, window, rate (no over mode)
--
-- A token given back is added to the stored level, clamped to the capacity;
-- the level's time is unchanged, so the refill since then still counts. The
-- hash's TTL is kept: a fuller bucket is full no later than it said.
--
-- Reply: integer, the number of buckets member was removed from.
local U = 1000000
local n = (#ARGV - 1) / 3
if n < 1 or n ~= math.floor(n) then
  return redis.error_reply('refund.lua: ARGV must be member and 3 values per bucket')
end
local member = ARGV[1]
local removed, tb = 0, 0
for i = 1, n do
  local limit, rate = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i + 1])
  local gone = redis.call('ZREM', KEYS[i], member)
  removed = removed + gone
  if rate > 0 then
    tb = tb + 1
    local state = KEYS[n + tb]
    if gone == 1 then
      local tokens = tonumber(redis.call('HGET', state, 'tokens'))
      if tokens then
        tokens = tokens + U
        if tokens > limit * U then tokens = limit * U end
        redis.call('HSET', state, 'tokens', tokens)
      end
    end
  end
end
if #KEYS ~= n + tb then
  return redis.error_reply('refund.lua: KEYS must be one per bucket and one hash per token bucket')
end
return removed
