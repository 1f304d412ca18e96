-- wrk script for scripts/bench-scale.sh and tests/integration/test_file_scale.py: writes
-- (or deletes) a fixed set of keys, each exactly once, and records every request's
-- latency itself. Usage:
--
--   wrk -tT -cC -dLONG -s scale.lua URL -- MODE FIRST COUNT BODY_BYTES PREFIXES T OUTDIR SEGMENTS
--
--   MODE      put: PUT each key (expects 201); delete: DELETE each key (expects 204)
--   FIRST     index of the first key; the keys are FIRST .. FIRST+COUNT-1
--   T         wrk's thread count (-t): thread t takes the indices FIRST+t, FIRST+t+T, ...
--   OUTDIR    where each thread writes MODE-t.progress and, at the end, MODE-t.result
--   SEGMENTS  latency histograms are kept per segment: a thread's n-th answer of Q goes
--             to segment floor(n * SEGMENTS / Q) (0 for one histogram)
--
-- Key i is "t<i mod PREFIXES>/k<i>" (the file store puts it in objects/t<p>~/k<i>, so no
-- directory holds more than COUNT / PREFIXES entries); its lock is the key, its token 1.
-- Its body (put) is "<key>\n" padded with "x" to BODY_BYTES bytes (cut to BODY_BYTES if
-- shorter), so that a reader can check any key's body from its name alone.
--
-- Why not wrk's own numbers: wrk's latency histogram, as done() sees it, has been
-- "corrected" for coordinated omission (stats_correct() in wrk.c adds synthetic samples for
-- every answer slower than twice the mean interval), so its percentiles are not those of
-- the requests sent; and wrk runs for a duration, not a number of requests. So every
-- request carries its key index in X-Request-Id, which fencekeeper echoes (docs/api.md),
-- response() looks up when that request was made (CLOCK_MONOTONIC through LuaJIT's FFI),
-- and adds the latency to a 1-µs-resolution histogram: exact percentiles over any set of
-- requests, by adding histograms. A thread's latency runs from building its request
-- (wrk sends it right after) to the callback for its parsed answer, as wrk measures.
--
-- When a thread has answers for all its keys it writes MODE-t.result (renamed into place:
-- complete or absent) and stops its event loop; the thread that finds every thread's
-- result in place ends wrk (os.exit(0)). A connection whose keys are all sent meanwhile
-- sends GET /healthz (X-Request-Id "idle") every 50 ms (delay()) until its thread stops:
-- counted apart, never in the latencies. A request lost on a broken connection leaves its thread unfinished:
-- the caller's stall timeout reports it.
--
-- MODE-t.progress: one line per second of this thread's answers:
--   <unix time, s> <answers so far> <slowest latency in the interval, µs>
-- MODE-t.result: "answers N", "idle N", "idle_bad N", "status CODE N", "bad INDEX STATUS
-- BODY" (the first 20 unexpected answers), then "lat SEGMENT MICROSECONDS COUNT" lines.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } fk_scale_timespec;
int clock_gettime(int clk_id, fk_scale_timespec *tp);
unsigned long pthread_self(void);
]]
local ts = ffi.new("fk_scale_timespec")
local CLOCK_REALTIME, CLOCK_MONOTONIC = 0, 1

local function mono_us()
   ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
   return tonumber(ts.tv_sec) * 1000000 + math.floor(tonumber(ts.tv_nsec) / 1000)
end

local function real_s()
   ffi.C.clock_gettime(CLOCK_REALTIME, ts)
   return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

local next_thread = 0
function setup(thread)
   thread:set("tid", next_thread)
   next_thread = next_thread + 1
end

local mode, first, count, body_bytes, prefixes, threads, outdir, segments
local expect, pad
local next_i, end_i, quota
local answers, idle, idle_bad = 0, 0, 0
local sent = {}       -- key index -> send time (µs, monotonic)
local hist = {}       -- segment -> {µs -> count}
local statuses = {}   -- HTTP status -> count
local bad = {}        -- the first unexpected answers
local progress, next_report, interval_max = nil, 0, 0
local init_thread, started = nil, false
local put_hdrs = { ["Content-Type"] = "application/octet-stream", ["Fencing-Token"] = "1" }
local del_hdrs = { ["Fencing-Token"] = "1" }
local idle_hdrs = { ["X-Request-Id"] = "idle" }

function init(args)
   mode = args[1]
   first = tonumber(args[2])
   count = tonumber(args[3])
   body_bytes = tonumber(args[4])
   prefixes = tonumber(args[5])
   threads = tonumber(args[6])
   outdir = args[7]
   segments = math.max(tonumber(args[8] or "0"), 1)
   if (mode ~= "put" and mode ~= "delete") or not (first and count and body_bytes and
         prefixes and threads and outdir) then
      error("scale.lua: usage: -- put|delete FIRST COUNT BODY_BYTES PREFIXES THREADS OUTDIR SEGMENTS")
   end
   expect = mode == "put" and 201 or 204
   pad = string.rep("x", body_bytes)
   end_i = first + count
   next_i = first + tid
   quota = 0
   if next_i < end_i then quota = math.floor((end_i - 1 - next_i) / threads) + 1 end
   for s = 0, segments - 1 do hist[s] = {} end
   progress = assert(io.open(outdir .. "/" .. mode .. "-" .. tid .. ".progress", "w"))
   next_report = mono_us() + 1000000
   init_thread = tonumber(ffi.C.pthread_self())
end

local function key_of(i)
   return "t" .. (i % prefixes) .. "/k" .. i
end

function request()
   -- wrk calls thread 0's request() once on its main thread, right after init(), to check
   -- that the request parses (script_verify_request() in wrk.c); that request is never
   -- sent, so it must not take a key.
   if not started then
      if tonumber(ffi.C.pthread_self()) == init_thread then
         return wrk.format("GET", "/healthz", idle_hdrs)
      end
      started = true
   end
   if next_i >= end_i then
      return wrk.format("GET", "/healthz", idle_hdrs)
   end
   local i = next_i
   next_i = next_i + threads
   local name = key_of(i)
   local hdrs = mode == "put" and put_hdrs or del_hdrs
   hdrs["Fencing-Lock"] = name
   hdrs["X-Request-Id"] = tostring(i)
   sent[i] = mono_us()
   if mode == "put" then
      local head = name .. "\n"
      local body
      if #head >= body_bytes then
         body = head:sub(1, body_bytes)
      else
         body = head .. pad:sub(1, body_bytes - #head)
      end
      return wrk.format("PUT", "/v1/resources/" .. name, hdrs, body)
   end
   return wrk.format("DELETE", "/v1/resources/" .. name, hdrs)
end

-- A connection whose thread has sent all its keys waits 50 ms before each /healthz
-- instead of sending them back to back while the last answers are on their way.
function delay()
   if next_i >= end_i then return 50 end
   return 0
end

local function finish()
   local path = outdir .. "/" .. mode .. "-" .. tid .. ".result"
   local f = assert(io.open(path .. ".tmp", "w"))
   f:write("answers ", answers, "\n", "idle ", idle, "\n", "idle_bad ", idle_bad, "\n")
   for code, n in pairs(statuses) do f:write("status ", code, " ", n, "\n") end
   for _, b in ipairs(bad) do f:write("bad ", b, "\n") end
   for s = 0, segments - 1 do
      for us, n in pairs(hist[s]) do f:write("lat ", s, " ", us, " ", n, "\n") end
   end
   f:close()
   assert(os.rename(path .. ".tmp", path))
   progress:write(string.format("%.3f %d %d\n", real_s(), answers, interval_max))
   progress:close()
   for t = 0, threads - 1 do
      local other = io.open(outdir .. "/" .. mode .. "-" .. t .. ".result", "r")
      if not other then
         wrk.thread:stop()
         return
      end
      other:close()
   end
   os.exit(0)
end

function response(status, headers, body)
   local id = headers["X-Request-Id"] or headers["x-request-id"]
   local i = tonumber(id)
   local t0 = i and sent[i]
   if not t0 then
      idle = idle + 1
      if status ~= 200 then idle_bad = idle_bad + 1 end
      return
   end
   sent[i] = nil
   local now = mono_us()
   local lat = now - t0
   local seg = math.floor(answers * segments / quota)
   local h = hist[seg]
   h[lat] = (h[lat] or 0) + 1
   answers = answers + 1
   statuses[status] = (statuses[status] or 0) + 1
   if status ~= expect and #bad < 20 then
      bad[#bad + 1] = i .. " " .. status .. " " .. body:sub(1, 200):gsub("%s", " ")
   end
   if lat > interval_max then interval_max = lat end
   if now >= next_report then
      progress:write(string.format("%.3f %d %d\n", real_s(), answers, interval_max))
      progress:flush()
      interval_max = 0
      next_report = now + 1000000
   end
   if answers == quota then finish() end
end
