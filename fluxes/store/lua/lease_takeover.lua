-- lease_takeover.lua: a hot standby takes over the lease of a leader whose process died.
--
-- KEYS[1]  lease key (string with a TTL; its value names the holder)
-- KEYS[2]  fence counter (INCR on every new leadership: the fencing token)
-- ARGV[1]  the holder seen dead (its liveness channel has no subscriber)
-- ARGV[2]  the new holder's name
-- ARGV[3]  lease time to live in milliseconds
--
-- Returns the new fencing token when the lease still names the dead holder (or
-- is free), false when another holder took it meanwhile (another standby).
-- The INCR fences out whatever the dead holder's name still writes: its writes
-- in flight, or a restarted incarnation under that name that took the lease
-- back meanwhile (it is refused on its next write and stands by).

local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then
  return false
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', tonumber(ARGV[3]))
return redis.call('INCR', KEYS[2])
