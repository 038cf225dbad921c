#!/usr/bin/env bash
# Gateway benchmark: locust (headless) -> one gateway process -> Redis -> worker(s).
#   loadtests/run_gateway_bench.sh [echo|mixed] [USERS] [SECONDS]
# Everything runs on loopback on free ports and is stopped at exit (by pid).
set -euo pipefail
cd "$(dirname "$0")/.."
MIX=${1:-echo}; USERS=${2:-64}; SECONDS_=${3:-30}
PY=${PYTHON:-.venv/bin/python}
WORK=$(mktemp -d /tmp/deepagents-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  [ -n "${KEEP_LOGS:-}" ] || rm -rf "$WORK"  # KEEP_LOGS=1 keeps the logs for inspection
}
trap cleanup EXIT
# A signal ends the script through the EXIT trap too (bash skips it for an untrapped one).
trap 'exit 130' INT TERM

port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(port); GW_PORT=$(port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --maxmemory-policy noeviction --dir "$WORK" --logfile "$WORK/redis.log" & PIDS+=($!)

KEY=$("$PY" -c 'from deepagents.gateway.auth import new_key; print(new_key())')
HASH=$("$PY" -c "from deepagents.gateway.auth import hash_key; print(hash_key('$KEY'))")
sed -n '/^gateway:/q;p' config/deepagents.yaml > "$WORK/config.yaml"
cat >> "$WORK/config.yaml" <<YAML
gateway:
  api_keys: [{tenant: bench, sha256: $HASH, name: bench}]
  defaults: {rate_per_s: 1000000, burst: 1000000, max_in_flight: 100000}
YAML
export DEEPAGENTS_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0" DEEPAGENTS_CONFIG="$WORK/config.yaml"
export DEEPAGENTS_PREFIX=bench DEEPAGENTS_BENCH_KEY="$KEY" DEEPAGENTS_BENCH_MIX="$MIX"
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

"$PY" -m deepagents gateway --port "$GW_PORT" > "$WORK/gateway.log" 2>&1 & GW_PID=$!; PIDS+=($GW_PID)
AGENTS="agents.echo:EchoAgent"
[ "$MIX" = mixed ] && AGENTS="agents.risk:RiskAgent agents.research:ResearchAgent"
WORKER_PIDS=()
for a in $AGENTS; do
  "$PY" -m deepagents worker "$a" > "$WORK/worker-${a##*:}.log" 2>&1 & PIDS+=($!); WORKER_PIDS+=($!)
done
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$GW_PORT/health" >/dev/null && break; sleep 0.1; done

# CPU seconds (user + system) the gateway process has used: steadier than req/s on a
# shared machine. Fields 14 and 15 of /proc/PID/stat, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
CPU0=$(cpu_ticks "$GW_PID"); WCPU0=$(for p in "${WORKER_PIDS[@]}"; do cpu_ticks "$p"; done | paste -sd+ | bc)
RCPU0=$(cpu_ticks "${PIDS[0]}")
# PROFILE=out.txt: py-spy samples the gateway during the run (collapsed stacks, one per line).
if [ -n "${PROFILE:-}" ]; then
  .venv/bin/py-spy record --pid "$GW_PID" --nonblocking --format raw --rate 200 --duration "$SECONDS_" \
    --output "$PROFILE" > "$WORK/py-spy.log" 2>&1 & PIDS+=($!)
fi
echo "locust: $USERS users, ${SECONDS_}s, mix=$MIX, gateway :$GW_PORT" >&2
# bash's `time` reports the CPU of locust too (a child): the load generator shares the cores.
TIMEFORMAT='%U %S'
{ time timeout $((SECONDS_ + 60)) .venv/bin/locust -f loadtests/locustfile.py --headless \
  -H "http://127.0.0.1:$GW_PORT" -u "$USERS" -r "$USERS" -t "${SECONDS_}s" --only-summary \
  --csv "$WORK/bench" > "$WORK/locust.log" 2>&1 || true; } 2> "$WORK/locust.time"
CPU1=$(cpu_ticks "$GW_PID"); WCPU1=$(for p in "${WORKER_PIDS[@]}"; do cpu_ticks "$p"; done | paste -sd+ | bc)
RCPU1=$(cpu_ticks "${PIDS[0]}")
secs() { awk -v a="$1" -v b="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN{print (b-a)/hz}'; }
"$PY" loadtests/summarize.py "$WORK/bench_stats.csv" --gateway-cpu-s "$(secs "$CPU0" "$CPU1")" \
  --worker-cpu-s "$(secs "$WCPU0" "$WCPU1")" --redis-cpu-s "$(secs "$RCPU0" "$RCPU1")" \
  --locust-cpu-s "$(awk '{print $1 + $2}' "$WORK/locust.time")"
[ -n "${KEEP_LOGS:-}" ] && echo "logs: $WORK" >&2 || true
