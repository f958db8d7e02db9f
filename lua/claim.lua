-- claim.lua: KEYS[1]=record KEYS[2]=tombstone (only when the store keeps tombstones)
-- ARGV[1]=the started record to create (layout in lua.go) ARGV[2]=retention ms
-- ARGV[3]='ttl' (optional): a replay also gives the record's PTTL
-- => {1, attempt, record}  owned: a fresh claim (record ''), this token's claim sent again,
--                          or a takeover of a run whose lease ran out (the record before it)
--    {2, record[, pttl]}   replay: the completed record (and its PTTL, when asked)
--    {3, lease ms left}    in progress: another owner holds the lease
--    {4}                   mismatch: the key was claimed with another fingerprint
--    {5}                   the record is in the previous format (a hash): run legacy.lua
--    {6, code, attempt}    the outcome expired; its tombstone remains
--    {0}                   not a record this script knows
-- The status codes are mirrored in redisstore/internal/record/reply.go.
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
if kind == 'C' then
  if ARGV[3] then return {2, v, redis.call('PTTL', KEYS[1])} end
  return {2, v}
end
local att, thr, at = string.match(string.sub(v, 27), '^(%d+):(%d+):()')
if not at then return {0} end
local tok = string.sub(ARGV[1], 19, 26)
if string.sub(v, 19, 26) == tok then return {1, tonumber(att), v} end
-- The claimer's threshold: its retention minus its lease.
local nthr = string.match(string.sub(ARGV[1], 27), '^%d+:(%d+):')
-- A released record (flags 'r') has no owner: take it over at once.
local flags = string.sub(v, 2, 2)
if flags ~= 'r' then
  -- PTTL is the lease's clock: the lease is held while it is above the threshold.
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > tonumber(thr) then return {3, ttl - tonumber(thr)} end
  -- The lease ran out. If this Redis started less than a lease ago, its owner may only have
  -- been cut off while Redis was down: it gets a lease of Redis's uptime to renew or complete.
  -- (Uptime counts whole seconds: leases under a second get no such grace.) The owner's lease
  -- is the claimer's retention minus the record's threshold when both run one retention; never
  -- longer than the claimer's own lease, and that when it tells nothing: a rolling deploy that
  -- changed the retention must not stretch the grace to the difference or remove it.
  local mine = tonumber(ARGV[2]) - tonumber(nthr)
  local lease = tonumber(ARGV[2]) - tonumber(thr)
  if lease <= 0 or lease > mine then lease = mine end
  if lease >= 1000 then
    local info = redis.pcall('INFO', 'server')
    local up = type(info) == 'string' and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
    if up and up * 1000 < lease then return {3, lease - up * 1000} end
  end
end
att = tonumber(att) + 1
if flags == 'r' then flags = '-' end
redis.call('SET', KEYS[1], 'S' .. flags .. string.sub(v, 3, 18) .. tok .. att .. ':' .. nthr .. ':' .. string.sub(v, 26 + at), 'PX', ARGV[2])
return {1, att, v}
