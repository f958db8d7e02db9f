-- checkpoint.lua: KEYS[1]=record; ARGV[1]=token ARGV[2]=the started record with the new
-- recovery point (layout in lua.go; its flags byte is replaced by the stored one) ARGV[3]=retention ms
-- ARGV[4]='keep' (optional): the record keeps its TTL (past MaxDuration the lease is not pushed out)
-- => 1 recorded (lease pushed out, unless 'keep') | 0 lost: another token owns the record, or it is completed or gone
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or string.sub(v, 1, 2) == 'Sr' or string.sub(v, 1, 1) ~= 'S' or string.sub(v, 19, 26) ~= ARGV[1] then
  if type(v) == 'table' and not string.find(v.err or '', 'WRONGTYPE', 1, true) then return v end
  return 0
end
if ARGV[4] == 'keep' then
  redis.call('SET', KEYS[1], string.sub(v, 1, 2) .. string.sub(ARGV[2], 3), 'KEEPTTL')
else
  redis.call('SET', KEYS[1], string.sub(v, 1, 2) .. string.sub(ARGV[2], 3), 'PX', ARGV[3])
end
return 1
