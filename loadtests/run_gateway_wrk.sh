#!/usr/bin/env bash
# Gateway benchmark with wrk (a C load generator, ~20 µs of CPU per request, so the
# figure is the gateway's, not the load generator's as with locust):
#   loadtests/run_gateway_wrk.sh [CONNECTIONS (default "16 64")] [SECONDS (20)] [RUNS (3)]
# wrk -> one gateway process -> Redis -> one echo worker, all on loopback, on free ports,
# stopped at exit (by pid). Each request is POST /v1/tasks?wait=5 (wrk_submit.lua). Per
# run: requests/s, p50/p95/p99 ms, and the CPU per request (ms) of each process in the
# chain, from /proc/<pid>/stat deltas over the run; then the medians per connection count.
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-"16 64"}; SECONDS_=${2:-20}; RUNS=${3:-3}
PY=${PYTHON:-.venv/bin/python}
if ! command -v wrk >/dev/null; then
  apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
fi
WORK=$(mktemp -d /tmp/deepagents-wrk.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  [ -n "${KEEP_LOGS:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(port); GW_PORT=$(port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --maxmemory-policy noeviction --dir "$WORK" --logfile "$WORK/redis.log" & REDIS_PID=$!; PIDS+=($REDIS_PID)

KEY=$("$PY" -c 'from deepagents.gateway.auth import new_key; print(new_key())')
HASH=$("$PY" -c "from deepagents.gateway.auth import hash_key; print(hash_key('$KEY'))")
sed -n '/^gateway:/q;p' config/deepagents.yaml > "$WORK/config.yaml"
cat >> "$WORK/config.yaml" <<YAML
gateway:
  api_keys: [{tenant: bench, sha256: $HASH, name: bench}]
  defaults: {rate_per_s: 1000000, burst: 1000000, max_in_flight: 100000}
YAML
export DEEPAGENTS_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0" DEEPAGENTS_CONFIG="$WORK/config.yaml"
export DEEPAGENTS_PREFIX=bench DEEPAGENTS_BENCH_KEY="$KEY"
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

"$PY" -m deepagents gateway --port "$GW_PORT" > "$WORK/gateway.log" 2>&1 & GW_PID=$!; PIDS+=($GW_PID)
"$PY" -m deepagents worker agents.echo:EchoAgent > "$WORK/worker.log" 2>&1 & WORKER_PID=$!; PIDS+=($WORKER_PID)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$GW_PORT/health" >/dev/null && break; sleep 0.1; done
# Warm-up: connections, scripts loaded, the worker's readers blocked.
wrk -t2 -c16 -d3s -s loadtests/wrk_submit.lua "http://127.0.0.1:$GW_PORT" >/dev/null 2>&1

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime, clock ticks
HZ=$(getconf CLK_TCK)
for c in $CONNS; do
  for run in $(seq "$RUNS"); do
    G0=$(ticks "$GW_PID"); W0=$(ticks "$WORKER_PID"); R0=$(ticks "$REDIS_PID")
    wrk -t2 -c"$c" -d"${SECONDS_}s" -s loadtests/wrk_submit.lua "http://127.0.0.1:$GW_PORT" \
      > "$WORK/wrk.out" 2>&1 & WRK_PID=$!
    sleep 0.2; K0=$(ticks "$WRK_PID" 2>/dev/null || echo 0)
    # wrk's own CPU: read just before it exits (its last second is idle-ish), so sample.
    K1=$K0; while kill -0 "$WRK_PID" 2>/dev/null; do K1=$(ticks "$WRK_PID" 2>/dev/null || echo "$K1"); sleep 0.5; done
    wait "$WRK_PID" || true
    G1=$(ticks "$GW_PID"); W1=$(ticks "$WORKER_PID"); R1=$(ticks "$REDIS_PID")
    tail -n 1 "$WORK/wrk.out" | "$PY" -c "
import json, sys
r = json.loads(sys.stdin.read())
n, hz = r['requests'], $HZ
ms = lambda d: round(d / hz / n * 1000, 3)
print(json.dumps({'connections': $c, 'run': $run, 'req_per_s': round(n / r['seconds']),
  'p50_ms': r['p50_ms'], 'p95_ms': r['p95_ms'], 'p99_ms': r['p99_ms'],
  'not_200': r['not_200'], 'socket_errors': r['socket_errors'],
  'cpu_ms_per_req': {'gateway': ms($G1 - $G0), 'worker': ms($W1 - $W0),
                     'redis': ms($R1 - $R0), 'wrk': ms($K1 - $K0)}}))
" | tee -a "$WORK/runs.jsonl"
  done
done
"$PY" - "$WORK/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for c in sorted({r["connections"] for r in rows}):
    mine = [r for r in rows if r["connections"] == c]
    med = lambda k: statistics.median(r[k] for r in mine)
    cpu = {p: statistics.median(r["cpu_ms_per_req"][p] for r in mine) for p in mine[0]["cpu_ms_per_req"]}
    print(json.dumps({"median": True, "connections": c, "runs": len(mine),
                      "req_per_s": med("req_per_s"), "p95_ms": med("p95_ms"),
                      "p99_ms": med("p99_ms"), "cpu_ms_per_req": cpu}))
PY
