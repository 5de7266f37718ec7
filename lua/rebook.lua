-- rebook.lua — put the slots of one node's waiting calls back into a
-- carrier's schedule that lost them (a Redis restarted empty, a node back
-- from its fallback): each keeps its member and its due time, so the slots
-- pace.lua gives after them come after them, at the carrier's interval.
--
-- KEYS[1]      sorted set of reserved slots (see pace.lua)
-- ARGV[1]      keep: integer µs the set must live past its last slot
--              (pace.lua's max(interval, 1 s)); > 0
-- ARGV[2k]     k = 1..N: member of a waiting call
-- ARGV[2k+1]   its due time: integer µs from now (>= 0)
--
-- A member already in the set keeps its slot (ZADD NX). Clock: Redis TIME
-- in integer µs, as pace.lua; every number handed to Redis is formatted
-- with %d.
--
-- Reply: integer, the slots added.
if redis.replicate_commands then redis.replicate_commands() end

local fmt = string.format
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local keep = tonumber(ARGV[1])
if not keep or keep <= 0 or #ARGV < 3 or #ARGV % 2 ~= 1 then
  return redis.error_reply('rebook.lua: ARGV must be keep and pairs of member and due')
end
local added, last = 0, 0
for i = 2, #ARGV, 2 do
  local due = tonumber(ARGV[i + 1])
  if not due or due < 0 then
    return redis.error_reply('rebook.lua: a due time must be an integer >= 0')
  end
  added = added + redis.call('ZADD', KEYS[1], 'NX', fmt('%d', now + due), ARGV[i])
  if due > last then last = due end
end
local ttl = redis.call('PTTL', KEYS[1])
local want = math.ceil((last + keep) / 1000) + 1000
if ttl < want then redis.call('PEXPIRE', KEYS[1], fmt('%d', want)) end
return added
