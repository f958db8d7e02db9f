-- complete.lua: KEYS[1]=record KEYS[2]=lease
-- ARGV[1]=token ARGV[2]=code ARGV[3]=body ARGV[4]=retention ms
-- => 1 stored (also when this token already stored it) | 0 lost: another token owns the record, or it is gone
local r = redis.call('HMGET', KEYS[1], 'state', 'tok')
if r[2] ~= ARGV[1] then
  return 0
end
if r[1] == 'completed' then
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'completed', 'code', ARGV[2], 'resp', ARGV[3])
redis.call('HDEL', KEYS[1], 'rpd')
redis.call('DEL', KEYS[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
