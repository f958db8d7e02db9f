-- lookup.lua: KEYS[1]=record
-- => {record pttl (-2 when absent), record type ('string', 'hash' for the previous format, 'none'), record or ''}
local t = redis.call('TYPE', KEYS[1]).ok
local v = ''
if t == 'string' then v = redis.call('GET', KEYS[1]) end
return {redis.call('PTTL', KEYS[1]), t, v}
