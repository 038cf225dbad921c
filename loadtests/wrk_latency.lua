-- wrk's own latency histogram as one JSON line at the end: requests/s and p50/p95/p99 (ms),
-- with the errors (non-2xx/3xx answers, timeouts). Used by loadtests/bench_console.py.
done = function(summary, latency, requests)
  local s = summary.duration / 1e6
  io.write(string.format(
    '{"requests_per_s": %.1f, "p50_ms": %.1f, "p95_ms": %.1f, "p99_ms": %.1f, "non_2xx": %d, "timeouts": %d}\n',
    summary.requests / s, latency:percentile(50) / 1000, latency:percentile(95) / 1000,
    latency:percentile(99) / 1000, summary.errors.status, summary.errors.timeout))
end
