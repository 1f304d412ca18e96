-- Acquire a Redis lock and issue its fencing token in one atomic step.
--
--   KEYS[1] = lock:NAME    the lock itself (value = the owner's unique id)
--   KEYS[2] = fence:NAME   the fencing-token counter (never expires, never reset)
--   KEYS[3] = fence-floor  the floor of every counter on this Redis, set by
--                          redis-raise-floor.sh after a failover that lost writes
--   ARGV[1] = owner        a value unique to this holder (host:pid:random)
--   ARGV[2] = ttl_ms       lock time-to-live in milliseconds
--
-- Returns the fencing token (an integer, strictly increasing per lock, and above the
-- floor) when the lock was acquired, nil when somebody else holds it.
--
--   redis-cli --eval redis-acquire.lua lock:report fence:report fence-floor , "$OWNER" 30000
--   EVAL "$(cat redis-acquire.lua)" 3 lock:report fence:report fence-floor "$OWNER" 30000
--
-- SET ... NX PX sets the value and the TTL in one command (never SETNX + PEXPIRE: a
-- crash between the two leaves a lock that never expires). Doing the INCR in the same
-- script means a token is only ever issued to the holder that actually got the lock,
-- and no other client can run between the two.
--
-- Tokens must stay below 2^53: Redis hands integers to Lua as doubles, and the floor
-- comparison below is exact only up to there.
--
-- The floor moves every counter above it in O(1): a counter at or below the floor is
-- set to the floor on its next acquisition and incremented from there (by Redis, in
-- exact 64-bit arithmetic). Called with only two keys (the recipe before floors), the
-- floor is not honoured: after a repair such a caller's tokens stay below fencekeeper's
-- floor and every write with them is refused, which is safe but stops that lock.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.call('INCR', KEYS[2])
  if KEYS[3] then
    local floor = redis.call('GET', KEYS[3])
    if floor and token <= tonumber(floor) then
      redis.call('SET', KEYS[2], floor)
      token = redis.call('INCR', KEYS[2])
    end
  end
  return token
end
return false
