-- wrk script for scripts/bench.sh. Usage:
--   wrk ... -s fk.lua URL -- put   TAG BODY_BYTES        one fresh lock+key per request,
--                                                       token = per-thread counter
--   wrk ... -s fk.lua URL -- cycle TAG BODY_BYTES KEYS TOKEN
--                                                       PUT TAG-i under lock TAG-i,
--                                                       i cycling over KEYS, fixed TOKEN
--                                                       (primed higher: all stale -> 409)
--   wrk ... -s fk.lua URL -- putk  TAG BODY_BYTES        as put, with Idempotency-Key:
--                                                       TAG-<thread>-<n> (a new key each)
--   wrk ... -s fk.lua URL -- replay TAG BODY_BYTES KEYS  PUT TAG-<thread>-i under lock
--                                                       TAG-<thread>-i with token 1 and
--                                                       Idempotency-Key TAG-<thread>-i,
--                                                       i cycling over KEYS: the same
--                                                       request again and again; once
--                                                       primed (bench.sh does), every
--                                                       answer is a replay
--   wrk ... -s fk.lua URL -- txn   TAG BODY_BYTES OPS  POST /v1/transactions of OPS puts,
--                                                       each a fresh key TAG-<thread>-<n>-<j>
--                                                       under its own lock, token n
-- Every lock and key name is unique per request in put mode: TAG-<thread>-<n>.
-- No response() callback: it would make wrk parse every body; wrk's "Non-2xx or 3xx
-- responses" line is what bench.sh checks instead.

local next_thread = 0
function setup(thread)
   thread:set("tid", next_thread)
   next_thread = next_thread + 1
end

local mode, tag, body, keys, token, ops
local n = 0
local hdrs = {}

function init(args)
   mode = args[1] or "put"
   tag = args[2] or "w"
   body = string.rep("x", tonumber(args[3] or "256"))
   keys = tonumber(args[4] or "1000")
   token = args[5] or "1"
   ops = tonumber(args[4] or "10")
   -- Threads interleave over the key space in cycle mode.
   n = tid
   -- In replay mode each thread has keys of its own: two threads never send one key at
   -- once (the second would get 409 idempotency_in_progress, not a replay).
   if mode == "replay" then n = 0 end
end

function request()
   local name, tok
   if mode == "txn" then
      n = n + 1
      local parts = {}
      for j = 1, ops do
         parts[j] = '{"op":"put","key":"' .. tag .. "-" .. tid .. "-" .. n .. "-" .. j ..
            '","token":' .. n .. ',"body":"' .. body .. '"}'
      end
      return wrk.format("POST", "/v1/transactions", {["Content-Type"] = "application/json"},
                        '{"ops":[' .. table.concat(parts, ",") .. "]}")
   end
   hdrs["Idempotency-Key"] = nil
   if mode == "put" or mode == "putk" then
      n = n + 1
      name = tag .. "-" .. tid .. "-" .. n
      tok = tostring(n)
      if mode == "putk" then
         hdrs["Idempotency-Key"] = name
      end
   elseif mode == "replay" then
      n = n + 1
      name = tag .. "-" .. tid .. "-" .. (n % keys)
      tok = "1"
      hdrs["Idempotency-Key"] = name
   else
      n = n + 1
      name = tag .. "-" .. (n % keys)
      tok = token
   end
   hdrs["Fencing-Lock"] = name
   hdrs["Fencing-Token"] = tok
   hdrs["Content-Type"] = "application/octet-stream"
   return wrk.format("PUT", "/v1/resources/" .. name, hdrs, body)
end
