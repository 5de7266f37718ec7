-- service.lua — the carriers taken out of service by hand, for the pool
-- (PUT and DELETE /api/v1/carriers/{name}/service).
--
-- KEYS[1]   hash: field = carrier name, value = the mark (opaque to the
--           script: cpsguard's own encoding)
-- ARGV[1]   op: "out", "in" or "list"
-- ARGV[2]   carrier name (out, in)
-- ARGV[3]   value (out; never empty)
--
-- A mark lives until it is removed ("in"): a carrier stays out of service
-- until an operator puts it back, whatever nodes come and go.
--
-- Reply: array {field, value, field, value, ...}: for "list", every mark;
-- for "out", the mark it replaced (if any); for "in", the one it removed
-- (if any).
local key = KEYS[1]
local op = ARGV[1]

if op == 'list' then
  return redis.call('HGETALL', key)
end

local f = ARGV[2]
if f == nil or f == '' then
  return redis.error_reply('ERR service.lua: carrier name required')
end
local reply = {}
local old = redis.call('HGET', key, f)
if old then
  reply = {f, old}
end
if op == 'out' then
  if ARGV[3] == nil or ARGV[3] == '' then
    return redis.error_reply('ERR service.lua: out needs a value')
  end
  redis.call('HSET', key, f, ARGV[3])
elseif op == 'in' then
  redis.call('HDEL', key, f)
else
  return redis.error_reply('ERR service.lua: unknown op')
end
return reply
