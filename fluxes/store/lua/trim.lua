-- trim.lua: remove the entries of a stream that every consumer group has acknowledged
-- (fluxes/store/retention.py).
--
-- KEYS[1]   the stream
-- KEYS[2]   (journals only) the partition's retention hash, where the trim is recorded
-- ARGV[1]   the greatest id the caller allows to remove ("" = no bound of its own)
-- ARGV[2]   (journals only) "1" when the trimmed entries were not archived: they are
--           then recorded as lost (`lost_until`, `lost_t`)
--
-- An entry may go when, for every consumer group of the stream, it is at or before
-- the group's last-delivered id and not pending (delivered but unacknowledged);
-- a stream without groups is left alone (nobody has read it). Checking the groups
-- and trimming in one script means no group can read or claim meanwhile.
--
-- Returns {entries removed, the greatest id removed or ""}. With KEYS[2], a trim
-- records `trimmed` (that id) and `trimmed_t` (the `t` field of that entry).

local stream = KEYS[1]
local t = redis.call('TYPE', stream).ok
if t == 'none' then return {0, ''} end
if t ~= 'stream' then
  return redis.error_reply('KEYTYPE XTRIM needs a stream but ' .. stream .. ' holds a ' .. t)
end
if KEYS[2] then
  local r = redis.call('TYPE', KEYS[2]).ok
  if r ~= 'none' and r ~= 'hash' then
    return redis.error_reply('KEYTYPE HSET needs a hash but ' .. KEYS[2] .. ' holds a ' .. r)
  end
end

-- Stream ids compared as (ms, seq), each an unsigned decimal of up to 20 digits.
local function split(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  if ms == nil then ms, seq = string.match(id, '^(%d+)$'), '0' end
  return ms, seq
end
local function num_less(a, b)
  a = string.gsub(a, '^0+(%d)', '%1')
  b = string.gsub(b, '^0+(%d)', '%1')
  if #a ~= #b then return #a < #b end
  return a < b
end
local function less(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  if am ~= bm then return num_less(am, bm) end
  return num_less(as, bs)
end
local function before(id)
  local ms, seq = split(id)
  if seq ~= '0' and #seq < 15 then return ms .. '-' .. (tonumber(seq) - 1) end
  if seq == '0' and ms ~= '0' and #ms < 15 then
    return (tonumber(ms) - 1) .. '-18446744073709551615'
  end
  if seq == '0' then return '0-0' end
  return nil  -- too large to count down exactly: the caller stays on the safe side
end

local bound = ARGV[1]
if bound == '' then bound = nil end
if bound and split(bound) == nil then
  return redis.error_reply('BADOP bad stream id ' .. bound)
end
local groups = redis.call('XINFO', 'GROUPS', stream)
if #groups == 0 then return {0, ''} end
for _, g in ipairs(groups) do
  local info = {}
  for k = 1, #g - 1, 2 do info[g[k]] = g[k + 1] end
  local limit = info['last-delivered-id']
  if tonumber(info['pending']) > 0 then
    local oldest = redis.call('XPENDING', stream, info['name'])[2]
    local b = before(oldest)
    if b == nil then return {0, ''} end
    if less(b, limit) then limit = b end
  end
  if bound == nil or less(limit, bound) then bound = limit end
end
if bound == '0-0' then return {0, ''} end
-- the greatest entry at or before the bound: what is removed ends there
local last = redis.call('XREVRANGE', stream, bound, '-', 'COUNT', 1)
if #last == 0 then return {0, ''} end
local entry = last[1]
local upto = entry[1]
-- XTRIM MINID keeps ids >= its argument: the id right after `upto`
local ms, seq = split(upto)
local minid
if #seq < 14 then  -- Lua prints numbers of 15 digits and more with an exponent
  minid = ms .. '-' .. (tonumber(seq) + 1)
else
  minid = upto  -- keeps `upto` itself: one entry too many, never one too few
  local prev = redis.call('XREVRANGE', stream, '(' .. upto, '-', 'COUNT', 1)
  if #prev == 0 then return {0, ''} end
  entry = prev[1]
  upto = entry[1]
end
local removed = redis.call('XTRIM', stream, 'MINID', minid)
if KEYS[2] and removed > 0 then
  local fields = entry[2]
  local stamp = ''
  for k = 1, #fields - 1, 2 do
    if fields[k] == 't' then stamp = fields[k + 1] end
  end
  redis.call('HSET', KEYS[2], 'trimmed', upto, 'trimmed_t', stamp)
  if ARGV[2] == '1' then
    redis.call('HSET', KEYS[2], 'lost_until', upto, 'lost_t', stamp)
  end
end
return {removed, upto}
