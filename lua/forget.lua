-- forget.lua: KEYS[1]=record KEYS[2]=tombstone KEYS[3]=the lease key of a record in the previous format
-- ARGV[1]='1' to force: forget a record whose lease is live too
-- ARGV[2]=the lease ms, for the grace after a restart that claim.lua gives
-- => {1, record, lease ms left} forgotten: the record and its tombstone are gone (record: as it was,
--                     a completed one cut after its code; '' when only a tombstone, or a record in the previous
--                     format, was left); the lease it fenced, 0 for none
--    {0}              nothing to forget
--    {3, lease ms left} refused: an owner holds the lease (or may, after a restart); nothing changed
--    {2, type}        not an idemkey record (another type, or a string that is not one); left alone
-- A forced forget fences the owner: its complete (SET XX), extend, checkpoint and watch find no
-- record, or another token's, and change nothing.
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then
  if redis.call('DEL', KEYS[2]) == 1 then return {1, '', 0} end
  return {0}
end
if t == 'hash' then -- the previous format: its lease is a key of its own
  local ttl = math.max(redis.call('PTTL', KEYS[3]), 0)
  if ARGV[1] ~= '1' and ttl > 0 then return {3, ttl} end
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return {1, '', ttl}
end
if t ~= 'string' then return {2, t} end
local v = redis.call('GET', KEYS[1])
local kind, flags = string.sub(v, 1, 1), string.sub(v, 2, 2)
if (kind ~= 'S' and kind ~= 'C') or #v < 20 then return {2, t} end
local left = 0
if kind == 'S' then
  local thr = string.match(string.sub(v, 27), '^%d+:(%d+):')
  if not thr then return {2, t} end
  if flags ~= 'r' then
    left = math.max(redis.call('PTTL', KEYS[1]) - tonumber(thr), 0)
    -- As claim.lua: within a lease of a restart, a lease that ran out may only have been cut off.
    local lease = tonumber(ARGV[2])
    if left == 0 and lease >= 1000 then
      local info = redis.pcall('INFO', 'server')
      local up = type(info) == 'string' and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
      if up and up * 1000 < lease then left = lease - up * 1000 end
    end
    if left > 0 and ARGV[1] ~= '1' then return {3, left} end
  end
else
  v = string.sub(v, 1, 60) -- fingerprint, attempt and code: not the outcome
end
redis.call('DEL', KEYS[1], KEYS[2])
if flags == 'w' then redis.call('PUBLISH', KEYS[1] .. ':w', '') end -- waiters (watch.lua) claim again
return {1, v, left}
