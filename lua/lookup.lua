-- lookup.lua: KEYS[1]=record KEYS[2]=lease
-- => {record pttl, lease pttl, field, value, field, value, ...}; record pttl -2 when absent
return {redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2]), unpack(redis.call('HGETALL', KEYS[1]))}
