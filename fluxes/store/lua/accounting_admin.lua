-- accounting_admin.lua: append admin events to the accounting stream, all of them or
-- none, only if the stream still ends where the writer read it (the writer checked
-- the events against the state folded up to there).
--
-- KEYS[1]   the accounting admin stream
-- ARGV[1]   the id of its last entry as the writer saw it ("0-0": empty)
-- ARGV[2..] the events (JSON), in order, each stored as field d of its own entry
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'stream' then
  return redis.error_reply('KEYTYPE XADD needs a stream but ' .. KEYS[1] .. ' holds a ' .. t)
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local seen = '0-0'
if #last > 0 then
  seen = last[1][1]
end
if seen ~= ARGV[1] then
  return redis.error_reply('CONFLICT ' .. seen)
end
local id
for i = 2, #ARGV do
  id = redis.call('XADD', KEYS[1], '*', 'd', ARGV[i])
end
return id
