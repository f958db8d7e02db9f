-- claim.lua: KEYS[1]=record KEYS[2]=tombstone (only when the store keeps tombstones)
-- ARGV[1]=the started record to create (layout in lua.go) ARGV[2]=retention ms
-- => {1, attempt, record}  owned: a fresh claim (record ''), this token's claim sent again,
--                          or a takeover of a run whose lease ran out (the record before it)
--    {2, record}           replay: the completed record
--    {3, lease ms left}    in progress: another owner holds the lease
--    {4}                   mismatch: the key was claimed with another fingerprint
--    {5}                   the record is in the previous format (a hash): run legacy.lua
--    {6, code, attempt}    the outcome expired; its tombstone remains
--    {0}                   not a record this script knows
-- The status codes are mirrored in redisstore/reply.go.
local v = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
if type(v) == 'table' then
  if string.find(v.err or '', 'WRONGTYPE', 1, true) then return {5} end
  return v
end
if not v then
  local t = KEYS[2] and tonumber(redis.call('GET', KEYS[2]))
  if not t then return {1, 1, ''} end
  redis.call('DEL', KEYS[1])
  local b1, b2, b3, b4 = string.byte(ARGV[1], 3, 6)
  if math.floor(t / 262144) ~= ((b1 * 256 + b2) * 256 + b3) * 256 + b4 then return {4} end
  return {6, math.floor(t / 256) % 1024, t % 256}
end
local kind = string.sub(v, 1, 1)
if (kind ~= 'S' and kind ~= 'C') or #v < 20 then return {0} end
if string.sub(v, 3, 18) ~= string.sub(ARGV[1], 3, 18) then return {4} end
if kind == 'C' then return {2, v} end
local att, thr, at = string.match(string.sub(v, 27), '^(%d+):(%d+):()')
if not at then return {0} end
local tok = string.sub(ARGV[1], 19, 26)
if string.sub(v, 19, 26) == tok then return {1, tonumber(att), v} end
-- PTTL is the lease's clock: the lease is held while it is above the threshold.
local ttl = redis.call('PTTL', KEYS[1])
if ttl > tonumber(thr) then return {3, ttl - tonumber(thr)} end
att = tonumber(att) + 1
local nthr = string.match(string.sub(ARGV[1], 27), '^%d+:(%d+):')
redis.call('SET', KEYS[1], string.sub(v, 1, 18) .. tok .. att .. ':' .. nthr .. ':' .. string.sub(v, 26 + at), 'PX', ARGV[2])
return {1, att, v}
