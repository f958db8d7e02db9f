-- release.lua: KEYS[1]=record KEYS[2]=lease; ARGV[1]=token
-- => 1 released | 0 lost: another token owns the record, or it is completed
-- A record with a recovery point keeps it: only the lease goes, so the next
-- claim takes over at once and resumes instead of starting over.
local r = redis.call('HMGET', KEYS[1], 'state', 'tok', 'rp')
if not r[1] then
  return 1
end
if r[2] ~= ARGV[1] or r[1] ~= 'started' then
  return 0
end
if r[3] and r[3] ~= '' then
  redis.call('DEL', KEYS[2])
else
  redis.call('DEL', KEYS[1], KEYS[2])
end
return 1
