-- respace.lua — a carrier's limit was lowered on a node: remove the slots
-- that node's process holds in the future.
--
-- KEYS[1]      the carrier's sorted set of reserved slots (see pace.lua)
-- ARGV[1]      the process's member prefix (non-empty): every member it
--              reserves starts with it
--
-- Slots are spaced when they are reserved. A limit lowered by a reload or a
-- live override spaces the reservations made from then on, but a call
-- already holding a slot got one spaced for the old limit: it would reach
-- the carrier at the old rate for up to max_wait, and every reservation
-- after it would queue behind the old queue's tail. The node that lowered
-- it removes its own slots still in the future — its calls waiting in the
-- pacer, a slot reserved with a call's admission whose call has not asked
-- for it yet, a priority call's place — and its calls take a slot again at
-- the new interval before they send (the node compares each slot's time
-- with [1]). Only the node's own: another node's calls would not know
-- their slots were removed and would send on them while new reservations
-- took the same times; each node removes its own when it applies the
-- change. A slot due already stays (its call sends on it). A fair call's
-- record (pace.lua's m:<member>) stays too: asking again, the call takes
-- the first free slot from its turn, as after an adaptive decrease. The
-- slots in the future are at most the carrier's cps times max_wait.
--
-- Reply (array of integers):
--   [1] now_us    Redis TIME in µs: a slot decided before it was spaced for
--                 the old limit
--   [2] removed   slots removed
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local prefix = ARGV[1]
local n = #prefix
local removed = 0
local ahead = redis.call('ZRANGEBYSCORE', key, string.format('(%d', now), '+inf')
for i = 1, #ahead do
  local m = ahead[i]
  if string.sub(m, 1, n) == prefix then
    redis.call('ZREM', key, m)
    removed = removed + 1
  end
end
return {now, removed}
