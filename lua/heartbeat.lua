-- heartbeat.lua — announce one node, count the live ones, and find other
-- processes that announce themselves under the same node id.
--
-- KEYS[1]   sorted set of nodes: member = node id, score = last beat (integer ms, Redis TIME)
-- KEYS[2]   sorted set of processes: member = node id .. " " .. instance id, score = last beat
--           (same hash tag as KEYS[1])
-- KEYS[3]   sorted set of the processes that read dialog tokens in opaque text (version 4,
--           sip/internal/opaque): member = as in KEYS[2] (node id alone when ARGV[3] is ""),
--           score = last beat (same hash tag). Older releases never write it.
-- ARGV[1]   node id (letters, digits, '.', '_', '-': never a space)
-- ARGV[2]   ttl in ms (> 0): a node or process whose last beat is older is not live
-- ARGV[3]   instance id of this process ("" = do not track processes)
-- ARGV[4]   Redis time in ms of this process's first beat ("0" on the first beat)
-- ARGV[5]   "leave" (optional): the process stops; its entries in KEYS[2] and KEYS[3] go,
--           and the node id's in KEYS[1] too unless another process of that node id beat
--           within ttl (a duplicate still running); nothing is recorded, and the reply is
--           {0, now, 0}. A node restarted under its node id is then not counted twice for
--           a ttl, nor its node id, left without a reader, taken for an older release's.
--
-- Reply: array {live, now, older, other...}: live = the live nodes including
-- this one (the live processes when more: two processes under one node id are
-- two deciders), now = Redis TIME in ms, older = the live nodes or processes
-- (whichever are more) of a release that cannot read version-4 dialog tokens:
-- a live node id with no live reader process, a live process not in KEYS[3]
-- (an older process under a node id a newer one uses too, a node rolled back
-- under its id), then the instance ids of the other live processes of this
-- node id that beat after ARGV[4]. A process restarted under its node id does
-- not see its dead predecessor, whose last beat came before the new one's
-- first; two processes running at once see each other.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[5] == 'leave' then
  if ARGV[3] ~= '' then
    local prefix = ARGV[1] .. ' '
    local me = prefix .. ARGV[3]
    redis.call('ZREM', KEYS[2], me)
    redis.call('ZREM', KEYS[3], me)
    local others = false
    local ttl = tonumber(ARGV[2])
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], string.format('(%d', now - ttl), '+inf')) do
      if string.sub(m, 1, #prefix) == prefix then others = true break end
    end
    if not others then redis.call('ZREM', KEYS[1], ARGV[1]) end
  end
  return {0, now, 0}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
local live = redis.call('ZCARD', KEYS[1])
local reader = ARGV[1]
if ARGV[3] ~= '' then reader = ARGV[1] .. ' ' .. ARGV[3] end
redis.call('ZADD', KEYS[3], now, reader)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[3], ttl * 2)

local reply = {0, now, 0}
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
-- The older ones: live node ids without a live reader process, and live
-- processes that are not readers.
local readers, readerNodes = {}, {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  readers[m] = true
  local sp = string.find(m, ' ', 1, true)
  readerNodes[sp and string.sub(m, 1, sp - 1) or m] = true
end
local olderNodes, olderProcs = 0, 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if not readerNodes[m] then olderNodes = olderNodes + 1 end
end
if ARGV[3] ~= '' then
  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if not readers[m] then olderProcs = olderProcs + 1 end
  end
end
reply[3] = math.max(olderNodes, olderProcs)
reply[1] = live
return reply
