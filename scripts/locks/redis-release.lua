-- Release a Redis lock, but only if it is still ours (compare-and-delete).
--
--   KEYS[1] = lock:NAME
--   ARGV[1] = owner   the value passed to redis-acquire.lua
--
-- Returns 1 when the lock was ours and is now deleted, 0 otherwise (it expired and
-- maybe somebody else holds it now: their lock is left alone).
--
--   redis-cli --eval redis-release.lua lock:report , "$OWNER"
--
-- A plain `DEL lock:NAME` is the classic bug: a holder whose TTL ran out deletes the
-- lock of the next holder, and a third client walks in while the second still works.
-- The fence counter is never touched here: tokens must keep growing forever.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
