-- extend.lua: KEYS[1]=record KEYS[2]=lease; ARGV[1]=token ARGV[2]=lease ms
-- => 1 extended | 0 lost: another token owns the record, or it is completed or gone
local r = redis.call('HMGET', KEYS[1], 'state', 'tok')
if r[1] ~= 'started' or r[2] ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
