-- Raise the fencing-token counter to at least a given value (never lower it).
--
--   KEYS[1] = fence:NAME
--   ARGV[1] = the current fence from fencekeeper (GET /v1/fences/NAME -> token)
--
-- Returns the counter after the call. The next redis-acquire.lua returns a token
-- strictly above the fence. Used after a Redis failover lost the last INCRs (tokens
-- went backwards and every write is rejected with 409 stale_token): see docs/locks.md.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if want == nil then
  return redis.error_reply('fence value is not a number: ' .. tostring(ARGV[1]))
end
if want > cur then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return cur
