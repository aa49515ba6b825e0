-- joblist_write.lua: one fenced step of the job-list read model.
--
-- KEYS[1]   the partition's job-list fence (the lease's epoch)
-- KEYS[2..] the keys the ops name, by index
-- ARGV[1]   fencing token: must equal GET KEYS[1], or nothing is written
-- ARGV[2..] ops: name, key index, argument count, arguments; name is one of
--           HSET HDEL ZADD ZREM SADD SREM HINCRBY (one field) UNLINK (run as is on the
--           key; SADD and SREM on a sorted set, the active index of a model written
--           before, add with score 0 and remove: it stays one, its scores no longer
--           read, until it empties, and the next SADD makes a set) or
--           POSITION group id entries-read: the folded position, kept as the
--           consumer group's last-delivered id (entries-read "" = unknown);
--           any pending entries (left by a version that read through the
--           group) are forgotten: they are before the position or delivered again
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  return redis.error_reply('FENCED ' .. tostring(current))
end
-- Redis keeps what a failing script wrote before it failed, so pass 1 checks
-- everything pass 2 could fail on (op names, key types, counters, the group).
local kind = {HSET='hash', HDEL='hash', HINCRBY='hash', ZADD='zset', ZREM='zset', SADD='set',
              SREM='set', UNLINK=false, POSITION='stream'}
-- A set may have been stored as a sorted set before (the active index). Turning it
-- into a set at once would block Redis for seconds at a million jobs: it is written
-- as a sorted set until it empties.
local was = {set='zset'}
local function as_zset(op, key, first, last)
  if op == 'SREM' then
    redis.call('ZREM', key, unpack(ARGV, first, last))
    return
  end
  local args = {}
  for k = first, last do
    args[#args + 1] = 0
    args[#args + 1] = ARGV[k]
  end
  redis.call('ZADD', key, 'NX', unpack(args))
end
local i = 2
while i <= #ARGV do
  local op, key, n = ARGV[i], KEYS[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2])
  if kind[op] == nil or key == nil or n == nil then
    return redis.error_reply('BADOP job-list op ' .. tostring(op) .. ' at ARGV[' .. i .. ']')
  end
  if kind[op] then
    local t = redis.call('TYPE', key)['ok']
    if t ~= 'none' and t ~= kind[op] and t ~= was[kind[op]] then
      return redis.error_reply('KEYTYPE ' .. op .. ' needs a ' .. kind[op] .. ' but ' ..
                               key .. ' holds a ' .. t)
    end
  end
  if op == 'HINCRBY' then
    local v = redis.call('HGET', key, ARGV[i + 3])
    if v and not string.match(v, '^%-?%d+$') then
      return redis.error_reply('KEYTYPE HINCRBY needs an integer but ' .. key .. ' ' ..
                               ARGV[i + 3] .. ' holds ' .. v)
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
    while redis.call('XPENDING', key, group)[1] > 0 do
      local ids = {}
      for k, entry in ipairs(redis.call('XPENDING', key, group, '-', '+', 1000)) do
        ids[k] = entry[1]
      end
      redis.call('XACK', key, group, unpack(ids))
    end
  else
    if kind[op] == 'set' and redis.call('TYPE', key)['ok'] == 'zset' then
      as_zset(op, key, i + 3, i + 2 + n)
    else
      redis.call(op, key, unpack(ARGV, i + 3, i + 2 + n))
    end
  end
  i = i + 3 + n
end
return 1
