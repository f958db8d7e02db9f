-- watch.lua: KEYS[1]=record; ARGV[1]=fingerprint (16 bytes, as stored)
-- => 1 marked: the record runs for this fingerprint; its completion or release will publish on
--      its wake-up channel (flags byte 'w') | 0 not so (completed, gone, another fingerprint): claim again
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or string.sub(v, 1, 1) ~= 'S' or string.sub(v, 2, 2) == 'r' or string.sub(v, 3, 18) ~= ARGV[1] then return 0 end
if string.sub(v, 2, 2) ~= 'w' then redis.call('SETRANGE', KEYS[1], 1, 'w') end
return 1
