-- complete.lua: KEYS[1]=record KEYS[2]=tombstone (only when the store keeps tombstones)
-- ARGV[1]=the completed record (layout in lua.go) ARGV[2]=the owner's token
-- ARGV[3]=tombstone value ARGV[4]=tombstone ms
-- => 1 stored (also when this lease stored it before) | 0 lost: another token owns the record, or it is gone
-- The record is written first and checked after (one command where reading first costs two);
-- a record that is not the caller's is put back as it was. Its TTL is kept: retention counts
-- from the claim, heartbeat or checkpoint before.
local old = redis.pcall('SET', KEYS[1], ARGV[1], 'XX', 'GET', 'KEEPTTL')
if type(old) == 'table' then
  if string.find(old.err or '', 'WRONGTYPE', 1, true) then return 0 end
  return old
end
if not old then return 0 end
if string.sub(old, 1, 1) == 'S' and string.sub(old, 2, 2) ~= 'r' and string.sub(old, 19, 26) == ARGV[2] then
  if KEYS[2] then redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4]) end
  -- Someone waits (watch.lua): wake them on the record's channel (not a key: no slot to share).
  if string.sub(old, 2, 2) == 'w' then redis.call('PUBLISH', KEYS[1] .. ':w', '') end
  return 1
end
if old == ARGV[1] then return 1 end
redis.call('SET', KEYS[1], old, 'KEEPTTL')
return 0
