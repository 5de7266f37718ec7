-- heartbeat.lua — announce one node, count the live ones, and find other
-- processes that announce themselves under the same node id.
--
-- KEYS[1]   sorted set of nodes: member = node id, score = last beat (integer ms, Redis TIME)
-- KEYS[2]   sorted set of processes: member = node id .. " " .. instance id, score = last beat
--           (same hash tag as KEYS[1])
-- KEYS[3]   sorted set of the nodes that read dialog tokens in opaque text (version 4,
--           sip/internal/opaque): member = node id, score = last beat (same hash tag).
--           Older releases beat into KEYS[1] only.
-- ARGV[1]   node id (letters, digits, '.', '_', '-': never a space)
-- ARGV[2]   ttl in ms (> 0): a node or process whose last beat is older is not live
-- ARGV[3]   instance id of this process ("" = do not track processes)
-- ARGV[4]   Redis time in ms of this process's first beat ("0" on the first beat)
--
-- Reply: array {live, now, older, other...}: live = the live nodes including
-- this one (the live processes when more: two processes under one node id are
-- two deciders), now = Redis TIME in ms, older = the live nodes that are not
-- in KEYS[3] (a release that cannot read version-4 dialog tokens), then the
-- instance ids of the other live processes of this node id that beat after
-- ARGV[4]. A process restarted
-- under its node id does not see its dead predecessor, whose last beat came
-- before the new one's first; two processes running at once see each other.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
local live = redis.call('ZCARD', KEYS[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[3], ttl * 2)
local older = live - redis.call('ZCARD', KEYS[3])
if older < 0 then older = 0 end

local reply = {0, now, older}
if ARGV[3] ~= '' then
  local since = tonumber(ARGV[4])
  if since == nil or since <= 0 then since = now end
  local prefix = ARGV[1] .. ' '
  local me = prefix .. ARGV[3]
  redis.call('ZADD', KEYS[2], now, me)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
  redis.call('PEXPIRE', KEYS[2], ttl * 2)
  local procs = redis.call('ZCARD', KEYS[2])
  if procs > live then live = procs end
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], string.format('(%d', since), '+inf')) do
    if m ~= me and string.sub(m, 1, #prefix) == prefix then
      reply[#reply + 1] = string.sub(m, #prefix + 1)
    end
  end
end
reply[1] = live
return reply
