-- pmi.lua: one rank's step in a job's PMI exchange (fluxes/store/pmi_kvs.py), atomically.
--
-- KEYS[1]   the job's PMI hash {ns}:pmi:<owner>:<jobid>
-- KEYS[2..] the request streams {ns}:exec:rank:<r> of every rank of the job (woken when
--           a barrier round completes, or breaks)
--
-- ARGV[1]   "enter" or "leave"
-- ARGV[2]   the job id (decimal)
-- ARGV[3]   this rank's index among the job's ranks (node rank)
-- ARGV[4]   the number of ranks of the job
-- enter: ARGV[5] the round, ARGV[6..] key, value pairs this rank put during the round
-- leave: ARGV[5] "1" when every task of the rank finalized, else "0"; ARGV[6] the reason
--        the job breaks when it was not clean (names the task)
--
-- The hash holds the KVS (fields "k:<key>"), per round the ranks that entered ("n:<round>"
-- counts, "r:<round>:<node>" marks), "open" (a round some rank entered and not all), "done"
-- (the last round complete),
-- "broken" (why the job cannot go on: a rank left before its tasks finalized), and the
-- ranks that left ("left" counts, "l:<node>" marks).
--
-- enter: refused with {"broken", reason} when the job is broken; else the puts are
-- stored and the rank counted once (a repeated call counts nothing); when the last rank
-- enters, the round's marks go and every rank's stream gets a `pmi` message naming the
-- round: returns {"done", round}; otherwise {"wait", count}.
-- leave: the rank is counted once; an unclean leave breaks the job, and if a round is
-- open every rank's stream gets a `pmi` message carrying the reason (nobody would
-- ever complete it). When every rank has left, the hash goes. Returns {"left", count}.

local hash = KEYS[1]
local op = ARGV[1]
local jobid = ARGV[2]
local node = ARGV[3]
local nnodes = tonumber(ARGV[4])
if nnodes == nil or nnodes < 1 or not string.match(jobid, '^%d+$') then
  return redis.error_reply('BADOP pmi: bad job id or rank count')
end

-- The message is spelt out: cjson writes numbers as doubles, which would round a job id.
local function wake(round, reason)
  local data = '{"m":[{"t":"pmi","id":' .. jobid .. ',"round":' .. round
  if reason then
    data = data .. ',"error":' .. cjson.encode(reason)
  end
  data = data .. '}]}'
  for i = 2, #KEYS do
    redis.call('XADD', KEYS[i], '*', 'd', data)
  end
end

if op == 'enter' then
  local round = ARGV[5]
  if round == nil or not string.match(round, '^%d+$') or (#ARGV - 5) % 2 ~= 0 then
    return redis.error_reply('BADOP pmi enter: bad round or puts')
  end
  local broken = redis.call('HGET', hash, 'broken')
  if broken then
    return {'broken', broken}
  end
  -- a repeated call for a round already complete (its reply was lost) counts nothing
  if tonumber(round) <= tonumber(redis.call('HGET', hash, 'done') or '0') then
    return {'done', tonumber(round)}
  end
  if redis.call('HSETNX', hash, 'r:' .. round .. ':' .. node, 1) == 0 then
    return {'wait', tonumber(redis.call('HGET', hash, 'n:' .. round) or '0')}
  end
  for i = 6, #ARGV, 2 do
    redis.call('HSET', hash, 'k:' .. ARGV[i], ARGV[i + 1])
  end
  local count = redis.call('HINCRBY', hash, 'n:' .. round, 1)
  if count < nnodes then
    redis.call('HSET', hash, 'open', round)
    return {'wait', count}
  end
  local marks = {'n:' .. round}
  for n = 0, nnodes - 1 do
    marks[#marks + 1] = 'r:' .. round .. ':' .. n
  end
  redis.call('HDEL', hash, unpack(marks))
  redis.call('HSET', hash, 'open', 0, 'done', round)
  wake(round, nil)
  return {'done', tonumber(round)}
end

if op == 'leave' then
  local clean = ARGV[5] == '1'
  if redis.call('HSETNX', hash, 'l:' .. node, 1) == 0 then
    return {'left', tonumber(redis.call('HGET', hash, 'left') or '0')}
  end
  local left = redis.call('HINCRBY', hash, 'left', 1)
  if left >= nnodes then
    redis.call('DEL', hash)
    return {'left', left}
  end
  if not clean and not redis.call('HGET', hash, 'broken') then
    local reason = ARGV[6] or 'PMI: a rank left before PMI_Finalize'
    redis.call('HSET', hash, 'broken', reason)
    local open = tonumber(redis.call('HGET', hash, 'open') or '0')
    if open > 0 then
      wake(tostring(open), reason)
    end
  end
  return {'left', left}
end

return redis.error_reply('BADOP pmi: unknown op ' .. tostring(op))
