-- dialogs_ended.lua — share the ends of dialogs among a pool's nodes.
--
-- KEYS[1]      sorted set of ended dialogs: member a dialog's or call's
--              key (hex; a call attempt's token's: "t" and hex; a mark
--              that one side's BYEs still pass: "a", the side, ":" and
--              hex), score
--              the Redis TIME (µs) a node recorded it at
-- ARGV[1]      ttl: integer µs an end is kept (> 0)
-- ARGV[2]      cap: the most ends kept (the oldest go first; > 0)
-- ARGV[3]      cursor: integer µs; the ends recorded at or after it are
--              returned (0: from the oldest kept)
-- ARGV[4]      page: the most ends returned (> 0)
-- ARGV[5..]    ends this node records now (at most 200, fewer than a page)
--
-- The ends recorded now are added first, then the set is trimmed (older
-- than ttl, beyond cap) and read from the cursor up to, not including, now:
-- a node does not read back the ends it records in this call (it has
-- them; at 1,000 calls a second they were half of what a sync moved). A
-- node still paging (a full page, [3] = 1) reads its ends of this call on
-- a later page. Every end recorded by one call shares its score, so with
-- pages larger than a call's ends a reader always moves on (after a full
-- page it reads on from that page's last score, and may see a few ends
-- twice).
--
-- Reply (array): [1] Redis TIME in µs, [2] the cursor to pass next,
-- [3] 1 when more ends follow the page, else 0, [4..] the ends read.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local cursor, page = tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 5, #ARGV do
  redis.call('ZADD', KEYS[1], now, ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now - ttl))
local n = redis.call('ZCARD', KEYS[1])
if n > cap then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - cap - 1)
end
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], math.floor(ttl / 1000) + 1000)
end
-- string.format: Lua's own number-to-string keeps 14 digits; TIME in µs has 16.
local got = redis.call('ZRANGEBYSCORE', KEYS[1], cursor, string.format('(%d', now), 'WITHSCORES', 'LIMIT', 0, page + 1)
-- Without more, the next read starts just after now: an end recorded
-- later has a later TIME (scripts run one at a time).
local out = {now, now + 1, 0}
local last = #got / 2
if last > page then
  last = page
  out[3] = 1
  -- Read on from the page's last score (ends of one call share a score).
  out[2] = tonumber(got[2 * page])
end
for i = 1, last do
  out[3 + i] = got[2 * i - 1]
end
return out
