-- checkpoint.lua: KEYS[1]=record KEYS[2]=lease
-- ARGV[1]=token ARGV[2]=lease ms ARGV[3]=recovery point ARGV[4]=its data
-- => 1 recorded, lease pushed out | 0 lost: another token owns the record, or it is completed or gone
local r = redis.call('HMGET', KEYS[1], 'state', 'tok')
if r[1] ~= 'started' or r[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'rp', ARGV[3], 'rpd', ARGV[4])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
