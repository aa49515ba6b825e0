-- lease.lua: acquire, renew or release a leader lease, with a fencing counter.
--
-- KEYS[1]  lease key (string with a TTL; its value names the holder)
-- KEYS[2]  fence counter (INCR on every new leadership: the fencing token)
-- ARGV[1]  operation: "acquire" | "renew" | "release" | "bump"
-- ARGV[2]  holder name (unique per process)
-- ARGV[3]  lease time to live in milliseconds
-- ARGV[4]  (acquire, renew) the last fencing token this holder had, or ""
-- ARGV[5]  (acquire) "wait" when the caller may not yet judge a free lease's holder
--          dead (Redis stalled it lately: fluxes/domain/liveness.py), else ""
--
-- acquire: returns a new fencing token when the lease was free or already this
--          holder's (a restarted holder), or false when another holds it; a free
--          lease is taken while "wait" only by its last holder (the fence is
--          still the token it had: nobody led since)
-- renew:   returns 1 when the lease was extended, 0 when this holder lost it; a
--          lease that expired while nobody else took it (the fence is still this
--          holder's token: Redis stalled past the TTL) is taken again
-- release: returns 1 when the lease was deleted, 0 when this holder did not have it
-- bump:    a new epoch for the holder (INCR the fence) or false when it lost the lease

local op, holder, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local last, wait = ARGV[4] or '', ARGV[5] or ''
local current = redis.call('GET', KEYS[1])
local function fence_is_last()
  return last ~= '' and redis.call('GET', KEYS[2]) == last
end
if op == 'acquire' then
  if not current then
    if wait == 'wait' and not fence_is_last() then
      return false
    end
    redis.call('SET', KEYS[1], holder, 'PX', ttl)
    return redis.call('INCR', KEYS[2])
  end
  if current == holder then
    -- the same holder name taking the lease again is a new incarnation (a
    -- supervised restart): a new epoch fences out anything the old one sent
    redis.call('PEXPIRE', KEYS[1], ttl)
    return redis.call('INCR', KEYS[2])
  end
  return false
elseif op == 'renew' then
  if current == holder then
    redis.call('PEXPIRE', KEYS[1], ttl)
    return 1
  end
  if not current and fence_is_last() then
    redis.call('SET', KEYS[1], holder, 'PX', ttl)
    return 1
  end
  return 0
elseif op == 'bump' then
  if current == holder then
    redis.call('PEXPIRE', KEYS[1], ttl)
    return redis.call('INCR', KEYS[2])
  end
  return false
elseif op == 'release' then
  if current == holder then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
return redis.error_reply('lease.lua: unknown operation ' .. tostring(op))
