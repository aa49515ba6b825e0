-- purge.lua: remove inactive jobs of one partition, atomically (fluxes/store/retention.py).
--
-- KEYS[1]   journal stream of the partition
-- KEYS[2]   the partition's exec progress hash (jobid -> ranks reported)
-- KEYS[3..] the jobs' eventlogs, job hashes and blobs; ops refer to them by index
--
-- ARGV[1]   timestamp of the `purge` journal entries (repr of a UNIX time)
-- ARGV[2..] one group per job:
--   jobid ke kh n {field digest kb}*n
--        the job's eventlog KEYS[ke] and hash KEYS[kh], and the n blob references
--        its hash holds: hash field, the digest it names, the blob KEYS[kb]
--
-- For each job whose eventlog exists: its eventlog must end with `clean` or
-- `invalidate` (an inactive job), else nothing at all is written. An eventlog is
-- the journal ids of the job's events (a string, each id followed by a space: the
-- last one names the journal entry read; a short one is the job hash's field `ev`,
-- a longer one its own key), or, written before that layout, a stream
-- of the events themselves. Then each blob
-- reference the hash still holds is released (as commit.lua's U op: `refs`
-- decremented, the blob deleted at 0), the hash, the eventlog and the job's exec
-- progress field are deleted, and a journal-only entry `purge` naming the job is
-- appended (fields j, n, t: the job-list and accounting folds and every replay
-- drop the job there). A job whose eventlog is already gone (purged before) is
-- passed over, so purging twice purges once.
--
-- Returns {number purged, last journal id or "", purged jobid...}, or an error
-- reply after which nothing was written:
--   "ACTIVE <jobid> <last event>"          the job is not inactive
--   "KEYTYPE <command> needs a <type> but <key> holds a <type>"
--   "BADOP <what is wrong>"                 a malformed call (a bug in the caller)
--
-- Pass 1 checks everything pass 2 could fail on; pass 2 only writes (Redis keeps
-- whatever a failing script wrote before it failed).

local TERMINAL = {clean = true, invalidate = true}
local INDEX_FIELD = 'ev'  -- the job hash's field holding a short index (commit.lua)
local nargv = #ARGV

local function count(i)
  local v = ARGV[i]
  if v == nil or #v > 9 or not string.match(v, '^%d+$') then return nil end
  return tonumber(v)
end

local function key_at(i)
  local k = count(i)
  if k == nil or k < 3 or k > #KEYS then return nil end
  return KEYS[k]
end

local function need(key, want)
  local have = redis.call('TYPE', key).ok
  if have ~= 'none' and have ~= want then
    return redis.error_reply('KEYTYPE ' .. want .. ' op needs a ' .. want .. ' but ' .. key
                             .. ' holds a ' .. have)
  end
  return nil
end

local err = need(KEYS[1], 'stream') or need(KEYS[2], 'hash')
if err then return err end
if ARGV[1] == nil or tonumber(ARGV[1]) == nil then
  return redis.error_reply('BADOP purge timestamp ' .. tostring(ARGV[1]))
end

-- Pass 1
local plan = {}
local checked = {}
local i = 2
while i <= nargv do
  local jobid = ARGV[i]
  if jobid == nil or not string.match(jobid, '^%d+$') then
    return redis.error_reply('BADOP bad jobid at ARGV[' .. i .. ']')
  end
  local eventlog, hash, n = key_at(i + 1), key_at(i + 2), count(i + 3)
  if eventlog == nil or hash == nil or n == nil then
    return redis.error_reply('BADOP bad key index or count at ARGV[' .. i .. ']')
  end
  local first = i + 4
  local nxt = first + 3 * n
  if nxt - 1 > nargv then
    return redis.error_reply('BADOP arguments missing at ARGV[' .. i .. ']')
  end
  local logtype = redis.call('TYPE', eventlog).ok
  if logtype ~= 'none' and logtype ~= 'string' and logtype ~= 'stream' then
    return redis.error_reply('KEYTYPE GET needs a string but ' .. eventlog .. ' holds a '
                             .. logtype)
  end
  err = need(hash, 'hash')
  if err then return err end
  local blobs = {}
  for j = first, nxt - 1, 3 do
    local blob = key_at(j + 2)
    if blob == nil then return redis.error_reply('BADOP bad blob index at ARGV[' .. j .. ']') end
    if not checked[blob] then
      err = need(blob, 'hash')
      if err then return err end
      local refs = redis.call('HGET', blob, 'refs')
      if refs and (#refs > 18 or not string.match(refs, '^%-?%d+$')) then
        return redis.error_reply('KEYTYPE HINCRBY needs an integer but ' .. blob
                                 .. ' refs holds ' .. string.sub(refs, 1, 20))
      end
      checked[blob] = true
    end
    blobs[#blobs + 1] = {ARGV[j], ARGV[j + 1], blob}
  end
  local last = {}
  local text = nil
  if logtype == 'string' then
    text = redis.call('GET', eventlog)
  elseif logtype == 'none' then
    -- a short index is the job hash's field (commit.lua)
    text = redis.call('HGET', hash, INDEX_FIELD) or nil
  end
  if text then
    local id = string.match(text, '(%S+)%s*$')
    local base = tonumber(string.match(text, '^(%d+)%-'))
    local ms, sq = string.match(id or '', '^(%d+)%-(%d+)$')
    if base and ms and tonumber(ms) < base then
      -- a later id is relative to the first's time (commit.lua)
      id = string.format('%d', tonumber(ms) + base) .. '-' .. sq
    end
    if id then last = redis.call('XRANGE', KEYS[1], id, id) end
    if id and #last == 0 then last = {{id, {}}} end  -- its entry gone: not inactive
  elseif logtype == 'stream' then
    last = redis.call('XREVRANGE', eventlog, '+', '-', 'COUNT', 1)
  end
  if #last > 0 then
    local fields = last[1][2]
    local name = nil
    for f = 1, #fields - 1, 2 do
      if fields[f] == 'n' then name = fields[f + 1] end
    end
    if not TERMINAL[name] then
      return redis.error_reply('ACTIVE ' .. jobid .. ' ' .. tostring(name))
    end
    plan[#plan + 1] = {jobid, eventlog, hash, blobs}
  end
  i = nxt
end

-- Pass 2
local out = {0, ''}
for _, job in ipairs(plan) do
  local jobid, eventlog, hash, blobs = job[1], job[2], job[3], job[4]
  for _, b in ipairs(blobs) do
    if redis.call('HGET', hash, b[1]) == b[2] then
      redis.call('HDEL', hash, b[1])
      if redis.call('EXISTS', b[3]) == 1 and redis.call('HINCRBY', b[3], 'refs', -1) <= 0 then
        redis.call('DEL', b[3])
      end
    end
  end
  redis.call('DEL', hash, eventlog)
  redis.call('HDEL', KEYS[2], jobid)
  out[2] = redis.call('XADD', KEYS[1], '*', 'j', jobid, 'n', 'purge', 't', ARGV[1])
  out[1] = out[1] + 1
  out[#out + 1] = jobid
end
return out
