-- claim.lua: KEYS[1]=record KEYS[2]=lease
-- ARGV[1]=fingerprint ARGV[2]=token ARGV[3]=lease ms ARGV[4]=retention ms
-- ARGV[5]=meta: scope, key, label and creation time, packed by redisstore for Lookup only
-- => {1, attempt, point, data}  owned: fresh claim (attempt 1) or takeover of a crashed attempt
--    {2, code, body}            replay: the stored outcome
--    {3, lease pttl}            in progress: another owner holds the lease
--    {4}                        mismatch: the key was claimed with another fingerprint
-- The status codes are mirrored in redisstore/reply.go.
local r = redis.call('HMGET', KEYS[1], 'state', 'fp', 'tok', 'att', 'code', 'resp', 'rp', 'rpd')
if not r[1] then
  redis.call('HSET', KEYS[1], 'state', 'started', 'fp', ARGV[1], 'tok', ARGV[2], 'att', 1, 'meta', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return {1, 1, '', ''}
end
-- Our own token: this call already succeeded and its reply was lost; answer it again.
if r[3] == ARGV[2] and r[1] == 'started' then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return {1, tonumber(r[4]), r[7] or '', r[8] or ''}
end
if r[2] ~= ARGV[1] then
  return {4}
end
if r[1] == 'completed' then
  return {2, tonumber(r[5]), r[6]}
end
-- PTTL is 0 in the lease's last millisecond: count it as run out.
local ttl = redis.call('PTTL', KEYS[2])
if ttl > 0 then
  return {3, ttl}
end
local att = redis.call('HINCRBY', KEYS[1], 'att', 1)
redis.call('HSET', KEYS[1], 'tok', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return {1, att, r[7] or '', r[8] or ''}
