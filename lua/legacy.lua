-- legacy.lua: claim of a record written in the previous format (before 0.2: a hash, and a
-- separate lease key); claim.lua answers {5} for those. Remove once no such record can exist.
-- KEYS[1]=record KEYS[2]=its lease key
-- ARGV[1]=the started record to create (layout in lua.go) ARGV[2]=retention ms
-- ARGV[3]=the request's fingerprint as given (the previous format stored it as it was)
-- => as claim.lua: {7, code, body} replay of the stored outcome, {4} mismatch, {3, lease ms left},
--    {1, attempt, record} takeover: the record is rewritten in the new format, keeping its history
local r = redis.call('HMGET', KEYS[1], 'state', 'fp', 'att', 'code', 'resp', 'rp', 'rpd')
if not r[1] then return {1, 0, ''} end -- gone meanwhile: claim again
if r[2] ~= ARGV[3] then return {4} end
if r[1] == 'completed' then return {7, tonumber(r[4]), r[5]} end
local ttl = redis.call('PTTL', KEYS[2])
if ttl > 0 then return {3, ttl} end
local rp, rpd = r[6] or '', r[7] or ''
local att = (tonumber(r[3]) or 1) + 1
local nthr = string.match(string.sub(ARGV[1], 27), '^%d+:(%d+):')
local v = string.sub(ARGV[1], 1, 26) .. att .. ':' .. nthr .. ':' .. #rp .. ':' .. rp .. #rpd .. ':' .. rpd .. '0:0'
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
return {1, att, v}
