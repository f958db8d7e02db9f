-- release.lua: KEYS[1]=record; ARGV[1]=token ARGV[2]='1' to keep the record in any case
-- ARGV[3]=wake-up channel
-- => 1 released, or already gone | 0 lost: another token owns the record, or it is completed
-- A record with history (a takeover, a recovery point, or ARGV[2]) keeps it: only the lease
-- ends, so the next claim takes over at once, as attempt n+1, and can resume or reconcile.
-- Otherwise the record goes, and the next claim starts afresh.
local v = redis.pcall('GET', KEYS[1])
if not v then return 1 end
if type(v) ~= 'string' or string.sub(v, 1, 1) ~= 'S' or string.sub(v, 19, 26) ~= ARGV[1] then
  if type(v) == 'table' and not string.find(v.err or '', 'WRONGTYPE', 1, true) then return v end
  return 0
end
local att, rp = string.match(string.sub(v, 27), '^(%d+):%d+:(%d+):')
if ARGV[2] == '1' or att ~= '1' or rp ~= '0' then
  -- Released (flags 'r'): the next claim takes it over at once.
  redis.call('SETRANGE', KEYS[1], 1, 'r')
else
  redis.call('DEL', KEYS[1])
end
if string.sub(v, 2, 2) == 'w' then redis.call('PUBLISH', ARGV[3], '') end -- someone waits (watch.lua)
return 1
