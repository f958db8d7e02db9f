-- extend.lua: KEYS[1]=record; ARGV[1]=token ARGV[2]=retention ms
-- => 1 extended: the lease runs its full length again | 0 lost: another token owns the record, or it is completed or gone
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or string.sub(v, 1, 2) == 'Sr' or string.sub(v, 1, 1) ~= 'S' or string.sub(v, 19, 26) ~= ARGV[1] then
  if type(v) == 'table' and not string.find(v.err or '', 'WRONGTYPE', 1, true) then return v end
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
