-- Extend a Redis lock's TTL, but only if it is still ours (compare-and-pexpire).
--
--   KEYS[1] = lock:NAME
--   ARGV[1] = owner
--   ARGV[2] = ttl_ms   the new time-to-live, from now
--
-- Returns 1 when extended, 0 when the lock is no longer ours (stop working: somebody
-- else may hold it, and fencekeeper will reject your writes anyway).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
