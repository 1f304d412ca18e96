-- Raise a counter to at least a given value (never lower it).
--
--   KEYS[1] = fence:NAME (one lock's token counter) or fence-floor (the floor of every
--             counter, see redis-acquire.lua)
--   ARGV[1] = the value to raise it to (e.g. the current fence from fencekeeper,
--             GET /v1/fences/NAME -> token, or the floor fencekeeper now holds)
--
-- Returns the counter after the call. The next redis-acquire.lua returns a token
-- strictly above it. Used after a Redis failover lost the last INCRs (tokens went
-- backwards): redis-raise-fence.sh (one lock) and redis-raise-floor.sh (every lock);
-- see docs/locks.md.
--
-- Values are compared as Lua numbers (doubles): exact up to 2^53, far above any token
-- a lock service hands out in practice.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if not string.match(tostring(ARGV[1]), '^%d+$') then
  return redis.error_reply('fence value is not a number: ' .. tostring(ARGV[1]))
end
local want = tonumber(ARGV[1])
if want > cur then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return cur
