-- request_claim.lua: take or drop ingest request claims of one partition (one slot).
--
-- KEYS[1..n]  claim keys (strings with a TTL whose value is the holder's token)
--
-- ARGV[1]     operation: "take" | "renew" | "drop"
-- ARGV[2]     the writer's token: `<worker name>#<incarnation>`, unique per process
-- ARGV[3]     the claim's time to live in milliseconds (take)
--
-- take: each key that is missing, holds the token, or holds a token of the same worker
--       name (an earlier incarnation: the worker restarted, and a new token fences
--       out anything the old one may still send) is set to the token with a fresh
--       time to live; returns, per key, 1 when the token holds it now and 0 when
--       another worker does.
-- renew: gives each key that still holds the token a fresh time to live (a long block
--       keeps its claims; a lapsed one is not taken again: another worker may have
--       had it since); returns, per key, 1 when renewed.
-- drop: deletes each key that holds the token; returns, per key, 1 when deleted.
--
-- A key of another type is no claim anyone holds: the script fails on it (WRONGTYPE)
-- before writing anything.

local op, token = ARGV[1], ARGV[2]
local function worker(t) return string.match(t, '^(.*)#[^#]*$') or t end
local me = worker(token)
local holders = {}
for i, key in ipairs(KEYS) do
  holders[i] = redis.call('GET', key)
end
local out = {}
for i, key in ipairs(KEYS) do
  local holder = holders[i]
  out[i] = 0
  if op == 'take' then
    if not holder or holder == token or worker(holder) == me then
      redis.call('SET', key, token, 'PX', tonumber(ARGV[3]))
      out[i] = 1
    end
  elseif op == 'renew' then
    if holder == token then
      redis.call('PEXPIRE', key, tonumber(ARGV[3]))
      out[i] = 1
    end
  elseif holder == token then
    redis.call('DEL', key)
    out[i] = 1
  end
end
return out
