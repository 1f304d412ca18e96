-- Acquire a Redis lock and issue its fencing token in one atomic step.
--
--   KEYS[1] = lock:NAME    the lock itself (value = the owner's unique id)
--   KEYS[2] = fence:NAME   the fencing-token counter (never expires, never reset)
--   ARGV[1] = owner        a value unique to this holder (host:pid:random)
--   ARGV[2] = ttl_ms       lock time-to-live in milliseconds
--
-- Returns the fencing token (an integer, strictly increasing per lock) when the lock
-- was acquired, nil when somebody else holds it.
--
--   redis-cli --eval redis-acquire.lua lock:report fence:report , "$OWNER" 30000
--   EVAL "$(cat redis-acquire.lua)" 2 lock:report fence:report "$OWNER" 30000
--
-- SET ... NX PX sets the value and the TTL in one command (never SETNX + PEXPIRE: a
-- crash between the two leaves a lock that never expires). Doing the INCR in the same
-- script means a token is only ever issued to the holder that actually got the lock,
-- and no other client can run between the two.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false
