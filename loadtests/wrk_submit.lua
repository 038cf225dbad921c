-- wrk script for loadtests/run_gateway_wrk.sh: submit-and-wait, POST /v1/tasks?wait=5, an
-- echo task per request with the bench tenant's key (DEEPAGENTS_BENCH_KEY). A request that
-- finished within the wait answers 200; anything else (202: no result yet, or an error)
-- is counted and printed at the end, so a fast figure made of failures shows as such.
wrk.method = "POST"
wrk.path = "/v1/tasks?wait=5"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("DEEPAGENTS_BENCH_KEY")
wrk.body = '{"intent":"echo","payload":{"text":"hello"}}'

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  not_done = 0
end

function response(status, headers, body)
  if status ~= 200 then
    not_done = not_done + 1
  end
end

function done(summary, latency, requests)
  local failed = 0
  for _, thread in ipairs(threads) do
    failed = failed + thread:get("not_done")
  end
  io.write(string.format(
    '{"requests": %d, "seconds": %.3f, "p50_ms": %.2f, "p95_ms": %.2f, "p99_ms": %.2f, ' ..
    '"not_200": %d, "socket_errors": %d}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000,
    latency:percentile(95) / 1000, latency:percentile(99) / 1000, failed,
    summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout))
end
