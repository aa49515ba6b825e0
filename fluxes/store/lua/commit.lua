-- commit.lua: apply one batch of a writer's effects atomically.
--
-- KEYS[1]   fence key: the current epoch of the writer's role (job manager leader)
-- KEYS[2]   journal stream of the partition
-- KEYS[3..] every other key an op names; ops refer to keys by their index in KEYS
--
-- ARGV[1]   fencing token; must equal GET KEYS[1]. The empty token marks an
--           unfenced writer (ingest), which may only create jobs: every
--           eventlog it names must be empty before the batch.
-- ARGV[2..] ops, each an op code followed by its arguments:
--   E k jobid expected n {name ts ctx extra}*n
--        append n events to eventlog KEYS[k] and to the journal; the eventlog
--        must hold exactly `expected` entries first. ctx/extra "" = none;
--        extra goes to the journal entry only (summaries for read models).
--   J jobid name ts ctx          journal-only entry (e.g. annotations)
--   H k n {field value}*n        HSET KEYS[k]
--   D k n {field}*n              HDEL KEYS[k]
--   X k n {field value}*n        XADD KEYS[k] * (an outbound message)
--   A k group n {id}*n           XACK KEYS[k] group ids (inputs consumed)
--   S k ttl value                SET KEYS[k] value (PX ttl when ttl > 0)
--   L k ttl value                RPUSH KEYS[k] value, PEXPIRE ttl (a reply a client BLPOPs)
--
-- Returns {events appended, last journal id or ""}, or an error reply:
--   "FENCED <current>"              the token is stale: nothing was written
--   "CONFLICT jobid:len,..."        eventlogs not at the expected length: nothing written

local token = ARGV[1]
if token ~= "" then
  local current = redis.call('GET', KEYS[1])
  if current ~= token then
    return redis.error_reply('FENCED ' .. tostring(current))
  end
end

local function skip(i)
  local op = ARGV[i]
  if op == 'E' then return i + 5 + 4 * tonumber(ARGV[i + 4]) end
  if op == 'J' then return i + 5 end
  if op == 'H' or op == 'X' then return i + 3 + 2 * tonumber(ARGV[i + 2]) end
  if op == 'A' then return i + 4 + tonumber(ARGV[i + 3]) end
  if op == 'D' then return i + 3 + tonumber(ARGV[i + 2]) end
  if op == 'S' or op == 'L' then return i + 4 end
  error('bad op ' .. tostring(op) .. ' at ARGV[' .. i .. ']')
end

-- Pass 1: every expectation holds, or nothing is written. Several E ops may
-- name the same eventlog, so lengths are tracked as the batch would leave them.
local conflicts = {}
local length = {}
local i = 2
while i <= #ARGV do
  if ARGV[i] == 'E' then
    local key = KEYS[tonumber(ARGV[i + 1])]
    local expected = tonumber(ARGV[i + 3])
    if token == "" and length[key] == nil and expected ~= 0 then
      return redis.error_reply('FENCED unfenced writers may only create jobs')
    end
    local actual = length[key]
    if actual == nil then
      actual = redis.call('XLEN', key)
    end
    if actual ~= expected then
      conflicts[#conflicts + 1] = ARGV[i + 2] .. ':' .. actual
    end
    length[key] = expected + tonumber(ARGV[i + 4])
  end
  i = skip(i)
end
if #conflicts > 0 then
  return redis.error_reply('CONFLICT ' .. table.concat(conflicts, ','))
end

-- Pass 2: write.
local journal = KEYS[2]
local appended = 0
local last = ""
i = 2
while i <= #ARGV do
  local op = ARGV[i]
  if op == 'E' then
    local log = KEYS[tonumber(ARGV[i + 1])]
    local jobid = ARGV[i + 2]
    local seq = tonumber(ARGV[i + 3])
    local n = tonumber(ARGV[i + 4])
    local j = i + 5
    for _ = 1, n do
      local name, ts, ctx, extra = ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 3]
      if ctx == "" then
        redis.call('XADD', log, '*', 'n', name, 't', ts)
      else
        redis.call('XADD', log, '*', 'n', name, 't', ts, 'c', ctx)
      end
      local fields = {'j', jobid, 's', seq, 'n', name, 't', ts}
      if ctx ~= "" then fields[#fields + 1] = 'c'; fields[#fields + 1] = ctx end
      if extra ~= "" then fields[#fields + 1] = 'x'; fields[#fields + 1] = extra end
      last = redis.call('XADD', journal, '*', unpack(fields))
      seq = seq + 1
      appended = appended + 1
      j = j + 4
    end
  elseif op == 'J' then
    local fields = {'j', ARGV[i + 1], 'n', ARGV[i + 2], 't', ARGV[i + 3]}
    if ARGV[i + 4] ~= "" then fields[#fields + 1] = 'c'; fields[#fields + 1] = ARGV[i + 4] end
    last = redis.call('XADD', journal, '*', unpack(fields))
  elseif op == 'H' then
    local n = tonumber(ARGV[i + 2])
    redis.call('HSET', KEYS[tonumber(ARGV[i + 1])], unpack(ARGV, i + 3, i + 2 + 2 * n))
  elseif op == 'D' then
    local n = tonumber(ARGV[i + 2])
    redis.call('HDEL', KEYS[tonumber(ARGV[i + 1])], unpack(ARGV, i + 3, i + 2 + n))
  elseif op == 'X' then
    local n = tonumber(ARGV[i + 2])
    redis.call('XADD', KEYS[tonumber(ARGV[i + 1])], '*', unpack(ARGV, i + 3, i + 2 + 2 * n))
  elseif op == 'A' then
    local n = tonumber(ARGV[i + 3])
    if n > 0 then
      redis.call('XACK', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], unpack(ARGV, i + 4, i + 3 + n))
    end
  elseif op == 'L' then
    redis.call('RPUSH', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 3])
    redis.call('PEXPIRE', KEYS[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2]))
  elseif op == 'S' then
    local ttl = tonumber(ARGV[i + 2])
    if ttl > 0 then
      redis.call('SET', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 3], 'PX', ttl)
    else
      redis.call('SET', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 3])
    end
  end
  i = skip(i)
end
return {appended, last}
