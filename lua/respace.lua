-- respace.lua — a carrier's limit was lowered on a node: remove the slots
-- that node's waiting calls hold in the future.
--
-- KEYS[1]      the carrier's sorted set of reserved slots (see pace.lua)
-- ARGV[1..n]   members: the node's calls waiting for a slot of the carrier
--
-- Slots are spaced when they are reserved. A limit lowered by a reload or a
-- live override spaces the reservations made from then on, but a call
-- already waiting holds a slot spaced for the old one: it would reach the
-- carrier at the old rate for up to max_wait. The node that lowered it
-- removes its own waiting calls' slots still in the future, and those
-- calls take a slot again at the new interval before they send (the node
-- compares each slot's time with [1]). Only the node's own: another node
-- of the pool does not know its slots were removed and would send on them
-- while new reservations took the same times; each node removes its own
-- when it applies the change. A slot due already stays (its call sends on
-- it), and so does every other member's. A fair call's record (pace.lua's
-- m:<member>) stays too: asking again, the call takes the first free slot
-- from its turn, as after an adaptive decrease.
--
-- Reply (array of integers):
--   [1] now_us    Redis TIME in µs: a slot decided before it was spaced for
--                 the old limit
--   [2] removed   slots removed
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local removed = 0
for i = 1, #ARGV do
  local s = tonumber(redis.call('ZSCORE', key, ARGV[i]))
  if s and s > now then
    redis.call('ZREM', key, ARGV[i])
    removed = removed + 1
  end
end
return {now, removed}
