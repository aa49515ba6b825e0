-- accounting_write.lua: one fenced step of a partition's usage read model.
--
-- KEYS[1]   the partition's accounting fence (the lease's epoch)
-- KEYS[2..] the keys the ops name, by index
-- ARGV[1]   fencing token: must equal GET KEYS[1], or nothing is written
-- ARGV[2..] ops: name, key index, argument count, arguments; name is one of
--           HSET HDEL ZADD ZREM UNLINK (run as is on the key) or
--           POSITION group id entries-read: the folded position, kept as the
--           consumer group's last-delivered id (entries-read "" = unknown)
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  return redis.error_reply('FENCED ' .. tostring(current))
end
-- Redis keeps what a failing script wrote before it failed, so pass 1 checks
-- everything pass 2 could fail on (op names, argument counts, key types, the group).
local kind = {HSET='hash', HDEL='hash', ZADD='zset', ZREM='zset', UNLINK=false,
              POSITION='stream'}
local least = {HSET=2, HDEL=1, ZADD=2, ZREM=1, UNLINK=0, POSITION=3}
local i = 2
while i <= #ARGV do
  local op, key, n = ARGV[i], KEYS[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2])
  if kind[op] == nil or key == nil or n == nil or n < least[op] or i + 2 + n > #ARGV then
    return redis.error_reply('BADOP accounting op ' .. tostring(op) .. ' at ARGV[' .. i .. ']')
  end
  if kind[op] then
    local t = redis.call('TYPE', key)['ok']
    if t ~= 'none' and t ~= kind[op] then
      return redis.error_reply('KEYTYPE ' .. op .. ' needs a ' .. kind[op] .. ' but ' ..
                               key .. ' holds a ' .. t)
    end
  end
  if op == 'ZADD' then
    for k = i + 3, i + 2 + n, 2 do
      if not tonumber(ARGV[k]) then
        return redis.error_reply('BADOP ZADD score ' .. ARGV[k])
      end
    end
  elseif op == 'POSITION' then
    local ok = redis.pcall('XPENDING', key, ARGV[i + 3])
    if type(ok) == 'table' and ok['err'] then
      return redis.error_reply('BADOP no group ' .. ARGV[i + 3] .. ' on ' .. key)
    end
    if ARGV[i + 5] ~= '' and not string.match(ARGV[i + 5], '^%d+$') then
      return redis.error_reply('BADOP entries-read ' .. ARGV[i + 5])
    end
  end
  i = i + 3 + n
end
i = 2
while i <= #ARGV do
  local op, key, n = ARGV[i], KEYS[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2])
  if op == 'POSITION' then
    local group, id, read = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
    if read == '' then
      redis.call('XGROUP', 'SETID', key, group, id)
    else
      redis.call('XGROUP', 'SETID', key, group, id, 'ENTRIESREAD', read)
    end
  else
    redis.call(op, key, unpack(ARGV, i + 3, i + 2 + n))
  end
  i = i + 3 + n
end
return 1
