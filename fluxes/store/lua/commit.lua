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
--   E k kh jobid expected n {name ts ctx extra}*n
--        append n events to the journal and their journal ids to the job's
--        eventlog index (a string: each id followed by a space; every event is
--        stored once, in the journal): while short (FIELD_LIMIT), the field `ev`
--        of the job hash KEYS[kh], then the eventlog key KEYS[k] (a key of its own
--        costs ~130 bytes more a job); the eventlog must hold exactly `expected`
--        events first. ctx/extra "" = none; extra goes to the journal entry only
--        (summaries for read models). An eventlog of the previous layout (a
--        stream of its own events) is appended to as before.
--   J jobid name ts ctx          journal-only entry (e.g. annotations)
--   H k n {field value}*n        HSET KEYS[k] (n >= 1)
--   D k n {field}*n              HDEL KEYS[k] (n >= 1)
--   X k n {field value}*n        XADD KEYS[k] * (an outbound message; 1 <= n <= 500)
--   Y k n {field value}*n m f {name}*f {kj field}*m
--                                X with the facts of m jobs copied in: the `name`d
--                                fields of each job hash KEYS[kj], packed (each value
--                                "<length>:<bytes>", a missing one "-", joined by ","),
--                                added as `field` (a start request carries what the
--                                exec would read of the hash; left out when the hash
--                                is not a hash or the values pass MAX_FACT_BYTES)
--   A k group n {id}*n           XACK KEYS[k] group ids (inputs consumed)
--   S k ttl value                SET KEYS[k] value (PX ttl when ttl > 0)
--   L k ttl value                RPUSH KEYS[k] value, PEXPIRE ttl (a reply a client BLPOPs)
--   B k n data                   add n references to the blob KEYS[k] (a hash: `data`,
--                                `refs`), creating it with `data` when missing (n >= 1)
--   U kj field kb digest         release the reference the job hash KEYS[kj] holds in
--                                `field` to the blob KEYS[kb]: only while the field still
--                                names `digest` (so a second release does nothing), the
--                                field is deleted, `refs` decremented, the blob deleted
--                                at 0
--   R kj kl jobid field value    HSET KEYS[kj] field value (the scheduler's R) only while the
--                                job waits for an allocation: its job hash exists and its
--                                eventlog KEYS[kl] shows no allocation yet (read backwards,
--                                an event only a job before its alloc has comes before any
--                                event of an allocated or finished one); otherwise the whole
--                                batch is refused with NOTWAITING
--   I k n {field incr}*n         HINCRBY KEYS[k] field incr (counters, e.g. dead letters
--                                per stream; every field must hold an integer or nothing)
--   C k token drop               the batch depends on the request claim KEYS[k] (a string
--                                with a TTL, fluxes.store.request_claims): it must
--                                hold `token`, otherwise the whole batch is refused
--                                with CLAIMED (the claim lapsed, and another ingest may
--                                have taken the request over and read its progress
--                                records: what this batch would record is stale).
--                                drop "1": delete the claim with the batch's writes
--                                (the writer's last batch in the partition)
--
-- Returns {events appended, last journal id or ""}, or one of these error
-- replies, after which nothing at all was written:
--   "FENCED <current>"                       the token is stale
--   "CONFLICT jobid:len,..."                 eventlogs not at the expected length
--   "KEYTYPE <command> needs a <type> but <key> holds a <type>"
--   "BADOP <what is wrong>"                  a malformed op (a bug in the writer)
--   "NOTWAITING jobid,..."                   R ops for jobs not waiting for an allocation
--   "CLAIMED key,..."                        C ops whose claim the writer no longer holds
--
-- Redis does not undo the writes of a script that fails half way, so pass 1
-- checks everything a write of pass 2 could fail on and pass 2 only writes
-- (docs/eventlog.md, "What commit.lua guarantees", lists what remains).

-- Everything above the line "-- per call --" runs once, when the library loads
-- (fluxes/store/scripts.py): the constants and helpers are built once, not on
-- every call. The call's KEYS and ARGV (as keys and argv: the whole text also
-- runs as one EVAL script, whose KEYS and ARGV are globals) and the state of one
-- batch are upvalues of the helpers that begin() sets first thing in each call
-- (Redis runs one call at a time; the last call's ARGV stays referenced until the
-- next call, at most one batch: MAX_COMMIT_EVENTS bounds it).
local keys, argv, nargv
local infield  -- eventlog key -> true while its index is its job hash's field
local index    -- the text of each eventlog index read (pass 2 SETs short ones)
-- The type each key has at this point of the batch: TYPE on first sight, then
-- what the batch's own writes turn a missing key into, so that two ops of one
-- batch cannot disagree on a key's type either.
local kind

-- The functions of the runtime the calls use, as upvalues: a global is looked up
-- through the function sandbox's tables (an upvalue costs a tenth of it, and a
-- commit reads them a few hundred times). Set by the first call (the load-time
-- environment has none of them); a call of the whole text as one script sets
-- them on every run.
local rcall, rpcall, error_reply, match, format, gsub, gmatch, sub, byte, concat, min, max
local tonum, tostr, typeof, unpack_, select_, ipairs_

local function begin(call_keys, call_argv)
  keys, argv, nargv = call_keys, call_argv, #call_argv
  -- a table costs about as much as ten upvalue reads and more to collect: the
  -- eventlog ones are made by the first E op (index_layout), if any
  infield, index, kind = nil, nil, {}
  if rcall == nil then
    rcall, rpcall, error_reply = redis.call, redis.pcall, redis.error_reply
    match, format, gsub, gmatch = string.match, string.format, string.gsub, string.gmatch
    sub, byte, concat, min, max = string.sub, string.byte, table.concat, math.min, math.max
    tonum, tostr, typeof, unpack_, select_, ipairs_ = tonumber, tostring, type, unpack, select,
                                                        ipairs
  end
end

-- Lua refuses to unpack more than ~8,000 values (LUAI_MAXCSTACK): no redis.call
-- gets more than CHUNK values from unpack, so HSET/HDEL/XACK go in chunks and an
-- outbound message, one XADD that cannot be split, is limited to CHUNK/2 fields.
local CHUNK = 1000
local MAX_MESSAGE_FIELDS = CHUNK / 2
-- Facts of one job a Y op copies at most (bytes of values); larger ones are read
-- from the job hash by the reader.
local MAX_FACT_BYTES = 4096
-- Larger TTLs make SET PX / PEXPIRE fail with "invalid expire time".
local MAX_TTL_DIGITS = 15
-- Eventlog indexes up to this many bytes are rewritten whole (SET) when they grow,
-- longer ones appended to (APPEND's spare room is then a small share).
local SET_LIMIT = 512
-- An index at most this long is kept in the job hash's field INDEX_FIELD (no key of
-- its own); a longer one moves to the eventlog key. Redis' default
-- hash-max-listpack-value: a longer value would make the job hash a hashtable.
local FIELD_LIMIT = 64
local INDEX_FIELD = 'ev'
-- An eventlog of this many events or more has mostly moved to its key (a whole id
-- takes 16 bytes, a later one 4 to 6): the E op reads the key first.
local KEY_FIRST = 6
-- Stream id parts are unsigned 64-bit integers.
local MAX_ID_PART = '18446744073709551615'

local COMMAND = {E = 'APPEND', J = 'XADD', H = 'HSET', D = 'HDEL', X = 'XADD', Y = 'XADD',
                 A = 'XACK', S = 'SET', L = 'RPUSH', B = 'HINCRBY', U = 'HDEL',
                 R = 'HSET', I = 'HINCRBY', C = 'GET'}

local function badop(i, why)
  return error_reply('BADOP ' .. tostr(argv[i]) .. ' at ARGV[' .. i .. ']: ' .. why)
end

-- The counts of the count texts of at most 3 characters seen (at most 1,110): a
-- commit reads a few counts for every op, and a pattern match and tonumber cost
-- ten times the look-up.
local COUNTS = {}

-- A count argument: a small non-negative integer, or nil.
local function count(i)
  local v = argv[i]
  local n = COUNTS[v]
  if n ~= nil or v == nil then return n end
  if #v > 9 or not match(v, '^%d+$') then return nil end
  n = tonum(v)
  if #v <= 3 then COUNTS[v] = n end
  return n
end

local function id_part_ok(part)
  return #part < 20 or (#part == 20 and part <= MAX_ID_PART)
end

-- XACK refuses an ill-formed id with an error, so ids are checked in pass 1.
local function stream_id_ok(id)
  local ms, seq = match(id, '^(%d+)%-(%d+)$')
  if ms == nil then
    ms = match(id, '^%d+$')
    seq = '0'
  end
  return ms ~= nil and id_part_ok(ms) and id_part_ok(seq)
end

-- nil when `key` may take `cmd` (wanting type `want`; `creates` when the
-- command makes a missing key), else the KEYTYPE error reply.
local function need(key, want, creates, cmd)
  local have = kind[key]
  if have == nil then
    have = rcall('TYPE', key).ok
  end
  if have == 'none' then
    if creates then have = want end
  elseif have ~= want then
    return error_reply('KEYTYPE ' .. cmd .. ' needs a ' .. want .. ' but ' .. key
                             .. ' holds a ' .. have)
  end
  kind[key] = have
  return nil
end

-- nil when the `refs` of blob `key` (if any) is a count HINCRBY accepts, else the
-- error reply (only a foreign write can make it something else).
local function refs_ok(key)
  if kind[key] ~= 'hash' then return nil end
  local refs = rcall('HGET', key, 'refs')
  if refs and (#refs > 18 or not match(refs, '^%-?%d+$')) then
    return error_reply('KEYTYPE HINCRBY needs an integer but ' .. key
                             .. ' refs holds ' .. sub(refs, 1, 20))
  end
  return nil
end

-- Events a job has only before its allocation, and events it has only from its
-- allocation on (or once it is over): RFC 21. Others (exception, memo, ...) come
-- at any time and say nothing either way.
local BEFORE_ALLOC = {submit = true, validate = true, depend = true, priority = true,
                      ['flux-restart'] = true, urgency = true,
                      ['dependency-add'] = true, ['dependency-remove'] = true}
local FROM_ALLOC = {alloc = true, start = true, finish = true, release = true, free = true,
                    clean = true, invalidate = true}
-- Events read back at most: a job waiting for resources has a priority event
-- among its last few (every urgency change and restart posts one).
local SCAN_EVENTS = 1024
local SCAN_BLOCK = 16

-- The name of a journal entry (nil when it has none or is gone).
local function entry_name(id)
  local entries = rcall('XRANGE', keys[2], id, id)
  if #entries == 0 then return nil end
  local fields = entries[1][2]
  for f = 1, #fields - 1, 2 do
    if fields[f] == 'n' then return fields[f + 1] end
  end
  return nil
end

-- The journal ids of an eventlog index, whole: the first is, the later ones are
-- relative to its time (a time below the first's; an index written before holds
-- whole ids, never below the first's).
local function index_ids(text)
  local ids, base = {}, nil
  for id in gmatch(text, '%S+') do
    local ms, sq = match(id, '^(%d+)%-(%d+)$')
    if base == nil then
      base = tonum(ms)
    elseif ms and base and tonum(ms) < base then
      id = format('%d', tonum(ms) + base) .. '-' .. sq
    end
    ids[#ids + 1] = id
  end
  return ids
end

-- The last journal id of an eventlog index, whole (nil for an index of one id or
-- none: the caller reads those with index_ids).
local function last_id(text)
  local base = match(text, '^(%d+)%-%d+ ')
  local ms, sq = match(text, ' (%d+)%-(%d+) *$')
  if base == nil or ms == nil then return nil end
  local at, first = tonum(ms), tonum(base)
  if at < first then  -- relative to the first id's time
    return format('%d', at + first) .. '-' .. sq
  end
  return ms .. '-' .. sq
end

-- True when the index `text` (journal ids) shows a job waiting for an allocation:
-- the last event's name decides in the common case (priority, alloc, ...), so the
-- index is only parsed whole when it says nothing either way.
local function index_waits(text)
  local id = last_id(text)
  if id ~= nil then
    local name = entry_name(id)
    if name == nil or FROM_ALLOC[name] then return false end
    if BEFORE_ALLOC[name] then return true end
  end
  local ids = index_ids(text)
  local from = #ids
  if id ~= nil then from = from - 1 end  -- its last event was read above
  for k = from, max(1, #ids - SCAN_EVENTS + 1), -1 do
    local name = entry_name(ids[k])
    if name == nil or FROM_ALLOC[name] then return false end
    if BEFORE_ALLOC[name] then return true end
  end
  return false
end

-- True when an eventlog of the previous layout (a stream of the job's events)
-- shows a job waiting for an allocation.
local function stream_waits(log)
  local upto = '+'
  local seen = 0
  while seen < SCAN_EVENTS do
    local entries = rcall('XREVRANGE', log, upto, '-', 'COUNT', SCAN_BLOCK)
    if #entries == 0 then return false end
    for _, entry in ipairs_(entries) do
      local fields = entry[2]
      local name = nil
      for f = 1, #fields - 1, 2 do
        if fields[f] == 'n' then name = fields[f + 1]; break end
      end
      if name == nil or FROM_ALLOC[name] then return false end
      if BEFORE_ALLOC[name] then return true end
      upto = '(' .. entry[1]
    end
    seen = seen + #entries
    if #entries < SCAN_BLOCK then return false end
  end
  return false
end

-- True when the job whose hash is `job` and eventlog is `log` waits for an
-- allocation (or raced its cancel: RFC 27 accepts that allocation): the hash
-- exists, and reading the eventlog backwards an event of BEFORE_ALLOC comes
-- before any of FROM_ALLOC. A replayed or forged alloc of a running or
-- finished job, or of no job at all, must not (over)write its R.
-- One pcall of HGET tells both that the job hash is a hash and, in the common
-- case, reads its short index: an index lives in one place only (the field while
-- short, else the eventlog key: the E op moves it in one step), so a field found
-- means no eventlog key.
local function waits_for_alloc(job, log)
  local text = rpcall('HGET', job, INDEX_FIELD)
  if typeof(text) == 'table' then return false end  -- not a hash
  if text then return index_waits(text) end
  if rcall('EXISTS', job) == 0 then return false end
  text = rpcall('GET', log)
  if typeof(text) == 'string' then return index_waits(text) end
  if not text then return false end  -- no eventlog
  if rcall('TYPE', log).ok ~= 'stream' then return false end
  return stream_waits(log)
end

-- nil when every given field of hash `key` holds an integer HINCRBY accepts (or
-- nothing), else the error reply.
local function counters_ok(key, first, n)
  if kind[key] ~= 'hash' then return nil end
  for f = first, first + 2 * (n - 1), 2 do
    local v = rcall('HGET', key, argv[f])
    if v and (#v > 18 or not match(v, '^%-?%d+$')) then
      return error_reply('KEYTYPE HINCRBY needs an integer but ' .. key .. ' '
                               .. sub(argv[f], 1, 40) .. ' holds '
                               .. sub(v, 1, 20))
    end
  end
  return nil
end

-- The job hash `hash`'s field index ('' for none), or nil when `hash` is not a
-- hash (or is to be something else in this batch); one pcall of HGET tells both.
local function field_index(hash)
  if kind[hash] ~= nil and kind[hash] ~= 'hash' then return nil end
  local field = rpcall('HGET', hash, INDEX_FIELD)
  if typeof(field) == 'table' then return nil end
  return field or ''
end

-- The layout of the eventlog `key` of the job whose hash is `hash` before the
-- batch writes it, as the E op's pass 1 sees it first: 'string' (an index, read
-- into index[key]; infield[key] when it is the hash's field), 'stream' (the
-- previous layout), 'none', or another type; and a KEYTYPE error reply when the
-- index would go to a hash that is not one. An index lives in one place only (the
-- field while short, else the key: pass 2 moves it in one step), so the place it
-- likely is (`field_first` for a short eventlog) is read first: one call finds
-- it there, a second the other place.
local function index_layout(key, hash, field_first)
  local field = nil
  if field_first then
    field = field_index(hash)
    if field ~= nil and field ~= '' then
      kind[hash] = 'hash'
      infield[key] = true
      index[key] = field
      return 'string', nil
    end
  end
  -- an index of its own (a string), or an eventlog of the previous layout (a
  -- stream): one GET tells the type and reads the index, in the common case
  local got = rpcall('GET', key)
  if typeof(got) == 'table' then return rcall('TYPE', key).ok, nil end
  if got then
    index[key] = got
    return 'string', nil
  end
  -- no key: the index, if any, is the job hash's field
  if not field_first then field = field_index(hash) end
  if field == nil then
    local err = need(hash, 'hash', true, 'HSET')
    if err ~= nil then return nil, err end
    field = ''
  end
  kind[hash] = 'hash'
  infield[key] = true
  index[key] = field
  if field ~= '' then return 'string', nil end
  return 'none', nil
end

-- redis.call(cmd, key, [group,] ARGV[first..last]), at most CHUNK values per call
-- (CHUNK is even, so HSET field/value pairs are never split).
local function chunked(cmd, key, group, first, last)
  while first <= last do
    local stop = min(first + CHUNK - 1, last)
    if group then
      rcall(cmd, key, group, unpack_(argv, first, stop))
    else
      rcall(cmd, key, unpack_(argv, first, stop))
    end
    first = stop + 1
  end
end

-- "<length>:" of a fact value of `n` bytes (a Y op packs every value so): a number
-- concatenated is formatted with "%.14g", a cost on every value of every start
-- request, so the texts of the lengths seen are kept (at most MAX_FACT_BYTES + 1)
local LENGTH_TEXT = {}
local function length_text(n)
  local text = LENGTH_TEXT[n]
  if text == nil then
    text = format('%d:', n)
    if n <= MAX_FACT_BYTES then LENGTH_TEXT[n] = text end
  end
  return text
end

-- The journal ids of one E op's events (pass 2), kept from call to call for ops
-- of at most IDS_KEPT events (its first n + 1 slots are written and read); a
-- longer op has a table of its own, so no more than IDS_KEPT + 1 ids stay referenced
local IDS, IDS_KEPT = {}, 64

-- per call --
begin(KEYS, ARGV)
local token = ARGV[1]
if token ~= "" then
  local current = rpcall('GET', KEYS[1])
  if typeof(current) == 'table' and current.err then
    return error_reply('KEYTYPE GET needs a string but ' .. KEYS[1] .. ' holds a '
                             .. rcall('TYPE', KEYS[1]).ok)
  end
  if current ~= token then
    return error_reply('FENCED ' .. tostr(current))
  end
end

-- Pass 1: parse every op, check its arguments and the types of the keys it
-- writes, and check every expected eventlog length. Several E ops may name the
-- same eventlog, so lengths are tracked as the batch would leave them.
-- four slots an op: op, index in ARGV of its first value, key, n (one table for
-- the batch, not one an op); the lists of refusals are made by the first one
local plan, nplan = {}, 0
local conflicts = nil
local notwaiting = nil  -- jobs of R ops that wait for no allocation
local claimed = nil     -- claims of C ops another writer holds
local length = nil
local journal = KEYS[2]
local i = 2
while i <= nargv do
  local op = ARGV[i]
  local cmd = COMMAND[op]
  if cmd == nil then return badop(i, 'unknown op') end
  local key, n, first, nxt, err
  if op == 'J' then
    first, nxt = i + 1, i + 5
    err = need(journal, 'stream', true, cmd)
  else
    local k = count(i + 1)
    if k == nil or k < 1 or k > #KEYS then return badop(i, 'no such key index') end
    key = KEYS[k]
    if op == 'E' then
      n = count(i + 5)
      local expected = count(i + 4)
      local kh = count(i + 2)
      if n == nil or expected == nil then return badop(i, 'bad count') end
      if kh == nil or kh < 1 or kh > #KEYS then return badop(i, 'no such key index') end
      first, nxt = i + 6, i + 6 + 4 * n
      if length == nil then length, index, infield = {}, {}, {} end
      local actual = length[key]
      local have = kind[key]
      if have == nil then
        have, err = index_layout(key, KEYS[kh], expected < KEY_FIRST)
      end
      if err ~= nil then
        have = nil
      elseif have == 'none' then
        if n > 0 then have = 'string' end
      elseif have ~= 'string' and have ~= 'stream' then
        err = error_reply('KEYTYPE APPEND needs a string but ' .. key .. ' holds a '
                                .. have)
      end
      if err == nil and have ~= nil then
        kind[key] = have
        if n > 0 then err = need(journal, 'stream', true, cmd) end
      end
      if err == nil then
        if token == "" and length[key] == nil and expected ~= 0 then
          return error_reply('FENCED unfenced writers may only create jobs')
        end
        if actual == nil then
          actual = 0
          if have == 'string' then
            -- one id and one space per event (GET answers false for a missing key)
            if index[key] == nil then index[key] = rcall('GET', key) or '' end
            actual = select_(2, gsub(index[key], ' ', ' '))
          elseif have == 'stream' then
            actual = rcall('XLEN', key)
          end
        end
        if actual ~= expected then
          conflicts = conflicts or {}
          conflicts[#conflicts + 1] = ARGV[i + 3] .. ':' .. actual
        end
        length[key] = expected + n
      end
    elseif op == 'H' or op == 'X' or op == 'D' then
      n = count(i + 2)
      if n == nil or n < 1 then return badop(i, 'bad count') end
      if op == 'X' and n > MAX_MESSAGE_FIELDS then
        return badop(i, 'a message may have at most ' .. MAX_MESSAGE_FIELDS .. ' fields')
      end
      local width = 2
      if op == 'D' then width = 1 end
      first, nxt = i + 3, i + 3 + width * n
      if op == 'X' then
        err = need(key, 'stream', true, cmd)
      else
        err = need(key, 'hash', op == 'H', cmd)
      end
    elseif op == 'Y' then
      n = count(i + 2)
      if n == nil or n < 1 then return badop(i, 'bad count') end
      local at = i + 3 + 2 * n
      local m, f = count(at), count(at + 1)
      if m == nil or f == nil or f < 1 or n + m > MAX_MESSAGE_FIELDS then
        return badop(i, 'bad count')
      end
      for b = 0, m - 1 do
        local kj = count(at + 2 + f + 2 * b)
        if kj == nil or kj < 1 or kj > #KEYS then return badop(i, 'no such key index') end
      end
      first, nxt = i + 3, at + 2 + f + 2 * m
      err = need(key, 'stream', true, cmd)
    elseif op == 'A' then
      n = count(i + 3)
      if n == nil or ARGV[i + 2] == nil then return badop(i, 'bad count') end
      first, nxt = i + 4, i + 4 + n
      if nxt - 1 > nargv then return badop(i, 'arguments missing') end
      for j = first, nxt - 1 do
        if not stream_id_ok(ARGV[j]) then return badop(i, 'bad stream id ' .. ARGV[j]) end
      end
      err = need(key, 'stream', false, cmd)
    elseif op == 'B' then
      n = count(i + 2)
      if n == nil or n < 1 then return badop(i, 'bad count') end
      first, nxt = i + 3, i + 4
      err = need(key, 'hash', true, cmd)
      if err == nil then err = refs_ok(key) end
    elseif op == 'U' then
      local kb = count(i + 3)
      if kb == nil or kb < 1 or kb > #KEYS then return badop(i, 'no such key index') end
      first, nxt = i + 2, i + 5
      n = KEYS[kb]  -- the blob's key, for pass 2
      err = need(key, 'hash', false, cmd)
      if err == nil then err = need(n, 'hash', false, 'HINCRBY') end
      if err == nil then err = refs_ok(n) end
    elseif op == 'R' then
      local kl = count(i + 2)
      if kl == nil or kl < 1 or kl > #KEYS then return badop(i, 'no such key index') end
      first, nxt = i + 3, i + 6
      if nxt - 1 > nargv then return badop(i, 'arguments missing') end
      -- a key of another type is no job waiting either: refused the same way
      if (kind[key] or 'hash') == 'hash' and waits_for_alloc(key, KEYS[kl]) then
        kind[key] = 'hash'
      else
        notwaiting = notwaiting or {}
        notwaiting[#notwaiting + 1] = ARGV[i + 3]
      end
    elseif op == 'I' then
      n = count(i + 2)
      if n == nil or n < 1 then return badop(i, 'bad count') end
      first, nxt = i + 3, i + 3 + 2 * n
      if nxt - 1 > nargv then return badop(i, 'arguments missing') end
      for f = first + 1, nxt - 1, 2 do
        local v = ARGV[f]
        if #v > 18 or not match(v, '^%-?%d+$') then
          return badop(i, 'bad increment ' .. sub(v, 1, 20))
        end
      end
      err = need(key, 'hash', true, cmd)
      if err == nil then err = counters_ok(key, first, n) end
    elseif op == 'C' then
      first, nxt = i + 2, i + 4
      if nxt - 1 > nargv then return badop(i, 'arguments missing') end
      err = need(key, 'string', false, cmd)
      if err == nil then
        local holder = rcall('GET', key)
        -- a missing claim is no one's: it lapsed, and another writer may have
        -- taken it, read the records and dropped it since
        if holder ~= ARGV[first] then
          claimed = claimed or {}
          claimed[#claimed + 1] = key
        end
      end
    else -- S or L
      local ttl = ARGV[i + 2]
      if ttl == nil or #ttl > MAX_TTL_DIGITS or not match(ttl, '^%d+$') then
        return badop(i, 'bad ttl')
      end
      first, nxt = i + 3, i + 4
      if op == 'S' then
        err = need(key, 'string', true, cmd)
      else
        err = need(key, 'list', true, cmd)
      end
    end
  end
  if nxt - 1 > nargv then return badop(i, 'arguments missing') end
  if err ~= nil then return err end
  plan[nplan + 1], plan[nplan + 2], plan[nplan + 3], plan[nplan + 4] = op, first, key, n
  nplan = nplan + 4
  i = nxt
end
if conflicts then
  return error_reply('CONFLICT ' .. concat(conflicts, ','))
end
if notwaiting then
  return error_reply('NOTWAITING ' .. concat(notwaiting, ','))
end
if claimed then
  return error_reply('CLAIMED ' .. concat(claimed, ','))
end

-- Pass 2: write.
local appended = 0
local last = ""
for s = 1, nplan, 4 do
  local op, j, key, n = plan[s], plan[s + 1], plan[s + 2], plan[s + 3]
  if op == 'E' then
    local jobid = ARGV[j - 3]
    -- the sequence number goes to XADD as a string: Redis formats a Lua number
    -- argument with "%.17g", a cost on every event (the count as given unless it
    -- has leading zeros, which the journal never held)
    local seq = tonum(ARGV[j - 2])
    local seqtext = ARGV[j - 2]
    if #seqtext > 1 and byte(seqtext, 1) == 48 then seqtext = format('%d', seq) end
    local hash = KEYS[tonum(ARGV[j - 4])]
    -- one redis.call per entry with its fields spelled out: no table built and
    -- unpacked per event (the hot path: every event of every job comes here)
    local stream = kind[key] == 'stream'  -- an eventlog of the previous layout
    local ids = IDS
    if n > IDS_KEPT then ids = {} end
    for k = 1, n do
      local name, ts, ctx, extra = ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 3]
      if stream then
        if ctx == "" then
          rcall('XADD', key, '*', 'n', name, 't', ts)
        else
          rcall('XADD', key, '*', 'n', name, 't', ts, 'c', ctx)
        end
      end
      if ctx == "" then
        if extra == "" then
          last = rcall('XADD', journal, '*', 'j', jobid, 's', seqtext, 'n', name, 't', ts)
        else
          last = rcall('XADD', journal, '*', 'j', jobid, 's', seqtext, 'n', name, 't', ts,
                            'x', extra)
        end
      else
        if extra == "" then
          last = rcall('XADD', journal, '*', 'j', jobid, 's', seqtext, 'n', name, 't', ts,
                            'c', ctx)
        else
          last = rcall('XADD', journal, '*', 'j', jobid, 's', seqtext, 'n', name, 't', ts,
                            'c', ctx, 'x', extra)
        end
      end
      ids[k] = last
      seq = seq + 1
      if k < n then seqtext = format('%d', seq) end
      appended = appended + 1
      j = j + 4
    end
    if not stream and n > 0 then
      -- the first id of an index is whole, the later ones relative to its time
      -- (docs/eventlog.md): a pending job's index fits Redis' embedded strings
      local text = index[key]
      local head = text
      if head == nil then head = rcall('GETRANGE', key, 0, 63) end
      local base = tonum(match(head, '^(%d+)%-'))
      -- the events of one call mostly share their time: its relative text is
      -- made once (a 13-digit tonumber and a format per event cost more than this)
      local at, rel
      for k = (base and 1 or 2), n do
        if base == nil then base = tonum(match(ids[1], '^(%d+)%-')) end
        local ms, sq = match(ids[k], '^(%d+)%-(%d+)$')
        if ms ~= at then at, rel = ms, format('%d', tonum(ms) - base) .. '-' end
        ids[k] = rel .. sq
      end
      ids[n + 1] = ''
      local add = concat(ids, ' ', 1, n + 1)
      if infield[key] and #text + #add <= FIELD_LIMIT then
        text = text .. add
        rcall('HSET', hash, INDEX_FIELD, text)
        index[key] = text
      elseif infield[key] then
        -- grown past the field: to the eventlog key
        text = text .. add
        rcall('HDEL', hash, INDEX_FIELD)
        rcall('SET', key, text)
        index[key] = text
        infield[key] = nil
      elseif text ~= nil and #text + #add <= SET_LIMIT then
        -- a short index is SET whole: APPEND leaves it spare room (doubling its
        -- allocation), which every pending job would keep
        text = text .. add
        rcall('SET', key, text)
        index[key] = text
      else
        rcall('APPEND', key, add)
        index[key] = nil
      end
    end
  elseif op == 'J' then
    local fields = {'j', ARGV[j], 'n', ARGV[j + 1], 't', ARGV[j + 2]}
    if ARGV[j + 3] ~= "" then fields[#fields + 1] = 'c'; fields[#fields + 1] = ARGV[j + 3] end
    last = rcall('XADD', journal, '*', unpack_(fields))
  elseif op == 'H' then
    chunked('HSET', key, nil, j, j + 2 * n - 1)
  elseif op == 'D' then
    chunked('HDEL', key, nil, j, j + n - 1)
  elseif op == 'X' then
    rcall('XADD', key, '*', unpack_(ARGV, j, j + 2 * n - 1))
  elseif op == 'Y' then
    local fields = {unpack_(ARGV, j, j + 2 * n - 1)}
    local at = j + 2 * n
    local m, f = tonum(ARGV[at]), tonum(ARGV[at + 1])
    local jobs = at + 2 + f
    for b = 0, m - 1 do
      -- pcall: a job hash of another type gives no facts, never a half-written batch
      local values = rpcall('HMGET', KEYS[tonum(ARGV[jobs + 2 * b])],
                                 unpack_(ARGV, at + 2, at + 1 + f))
      if typeof(values) == 'table' and values.err == nil then
        local parts, size = {}, 0
        for c = 1, f do
          local v = values[c]
          if v then
            parts[c] = length_text(#v) .. v
            size = size + #v
          else
            parts[c] = '-'
          end
        end
        if size <= MAX_FACT_BYTES then
          fields[#fields + 1] = ARGV[jobs + 2 * b + 1]
          fields[#fields + 1] = concat(parts, ',')
        end
      end
    end
    rcall('XADD', key, '*', unpack_(fields))
  elseif op == 'A' then
    chunked('XACK', key, ARGV[j - 2], j, j + n - 1)
  elseif op == 'L' then
    rcall('RPUSH', key, ARGV[j])
    rcall('PEXPIRE', key, tonum(ARGV[j - 1]))
  elseif op == 'B' then
    rcall('HSETNX', key, 'data', ARGV[j])
    rcall('HINCRBY', key, 'refs', n)
  elseif op == 'U' then
    if rcall('HGET', key, ARGV[j]) == ARGV[j + 2] then
      rcall('HDEL', key, ARGV[j])
      if rcall('EXISTS', n) == 1 and rcall('HINCRBY', n, 'refs', -1) <= 0 then
        rcall('DEL', n)
      end
    end
  elseif op == 'R' then
    rcall('HSET', key, ARGV[j + 1], ARGV[j + 2])
  elseif op == 'I' then
    for f = j, j + 2 * (n - 1), 2 do
      rcall('HINCRBY', key, ARGV[f], ARGV[f + 1])
    end
  elseif op == 'C' then
    if ARGV[j + 1] == '1' and rcall('GET', key) == ARGV[j] then
      rcall('DEL', key)
    end
  elseif op == 'S' then
    local ttl = tonum(ARGV[j - 1])
    if ttl > 0 then
      rcall('SET', key, ARGV[j], 'PX', ttl)
    else
      rcall('SET', key, ARGV[j])
    end
  end
end
return {appended, last}
