"""The remote-agent adapter's overhead per call, over a bare aiohttp POST on loopback; the
drain of a worker process with a no-op Node agent against the in-process EchoAgent; and the
two HTTP clients' POSTs per second.

    .venv/bin/python loadtests/bench_remote.py --calls 2000 [--breaker] [--methods run]
    .venv/bin/python loadtests/bench_remote.py --clients --calls 3000 --runs 3
    .venv/bin/python loadtests/bench_remote.py --path --tasks 20000 --concurrency 1000 --runs 3
    .venv/bin/python loadtests/bench_remote.py --drain --tasks 2000 --runs 5 \
        --max-connections 8 [--transport grpc] [--methods execute|run|run_batch] \
        [--batch 32 --batch-wait-ms 0 --batch-requests 2 --concurrency 100] \
        --redis-url redis://127.0.0.1:6379/0

Against the Node reference agent (``agents/remote/node/risk-agent.js``) on 127.0.0.1, one
call at a time on one keep-alive connection, interleaved in rounds so drift in the machine's
load hits both alike:

- bare: ``aiohttp.ClientSession.post`` (the adapter's client) of a ready-made execute
  request body;
- adapter: ``RemoteAgent.execute`` of the same task (envelope, headers, timeout from the
  deadline, size-capped read, content-type check, response validation, Result).

Prints p50 and p90 of each and the p50 difference (the issue's target: at most 0.5 ms).
``--methods run`` (or ``run_batch``): the service implements that one-call form alone, the
bare request is a POST of it (a batch of one for ``run_batch``), and the adapter runs the
whole contract (can_handle, prepare_context, execute, post_process) of the task.

``--drain``: per run, N tasks are submitted, then one worker process drains them, timed from
its registration to an empty backlog: ``deepagents worker agents.echo:EchoAgent`` (the
contract in the worker's process) and ``deepagents worker --remote noop`` (the same contract
as four HTTP calls per task to the Node agent answering ``execute`` with an empty success,
the fleet's circuit breaker in front of it; ``--transport grpc``: the Python reference agent
over gRPC with ``--noop`` instead; ``--transport pull``: the worker in pull mode and the
Python puller ``agents/remote/python/risk_puller.py --noop`` leasing up to ``--batch`` tasks
per call; ``--methods execute``: the Node agent's health says it
implements ``execute`` alone, so a task is one call; ``run``: one call per task doing the
whole contract; ``run_batch``: tasks share requests, up to ``--batch`` per request). The
two alternate within each run
(paired: the machine's load drifts alike for both); prints a JSON line per run and the
medians.

``--path``: the remote path alone, without the worker around it: ``--tasks`` tasks through
``AgentRunner`` and ``RemoteAgent`` (the fleet's breaker in front, on Redis) against the
Node agent implementing ``run_batch`` alone (``--transport grpc``: the Python no-op agent
over gRPC), ``--concurrency`` at a time, after the start-up heap is frozen as a worker's is;
prints the process's CPU µs per task (``--runs`` times). ``--struct`` (gRPC): the service
does not declare ``json_bytes``, so the worker sends Structs, as to an older service.

``--clients``: ``--calls`` POSTs of the execute request to the Node agent, through httpx's
``AsyncClient`` and through aiohttp's ``ClientSession``, at 1, 8 and 32 in flight, the two
alternating per run: POSTs/s, medians of ``--runs``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson

from deepagents.config import FileConfig, Settings, parse_config
from deepagents.contract import Task
from deepagents.contract.task import utcnow
from deepagents.orchestrator import Orchestrator
from deepagents.remote import remote_agent_class
from deepagents.transport.redis_streams import connect

ROOT = Path(__file__).resolve().parents[1]
ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


async def bench(url: str, calls: int, redis_url: str | None, methods: str) -> dict[str, float]:
    entry = FileConfig.model_validate(
        {"agents": {"bench": {"intents": ["risk_check"], "remote": {"url": url}}}}
    ).agents["bench"]
    form = next((f for f in ("run_batch", "run") if f in methods.split(",")), "execute")
    # With --breaker the fleet's circuit breaker is in front (its Redis on every call, but a
    # 'closed' trusted for 0.2 s and successes sent every 0.25 s).
    redis = connect(redis_url) if redis_url else None
    prefix = f"benchoverhead-{os.getpid()}"
    agent = remote_agent_class("bench", entry)(redis=redis, prefix=prefix)
    task = Task(intent="risk_check", payload=ORDER, deadline=utcnow() + timedelta(hours=1))
    await agent.introduce()  # what the service implements
    await agent.can_handle(task)  # sets the delivery's envelope, as the worker's run does
    context = await agent.prepare_context(task)
    request = {"protocol": 1, "task": {"id": task.task_id, "intent": task.intent,
        "payload": ORDER, "tenant": None}, "attempt": 1, "time_left_ms": 3600000,
        "traceparent": None, "idempotency_key": f"{task.task_id}:1"}  # fmt: skip
    if form == "execute":
        request["context"] = context["remote"]
    elif form == "run_batch":
        request = {"protocol": 1, "runs": [request]}
    body = orjson.dumps(request)

    async def adapter_run() -> None:
        if form == "execute":
            await agent.execute(context)
            return
        # The whole contract of the task, as the worker's runner calls it.
        assert await agent.can_handle(task)
        result = await agent.execute(await agent.prepare_context(task))
        await agent.post_process(result)

    bare, adapter = [], []
    async with aiohttp.ClientSession(headers={"content-type": "application/json"}) as client:
        for _ in range(200):  # warm both paths
            async with client.post(f"{url}/v1/{form}", data=body) as response:
                await response.read()
            await adapter_run()
        for _ in range(calls):
            t0 = time.perf_counter()
            async with client.post(f"{url}/v1/{form}", data=body) as response:
                orjson.loads(await response.read())
            t1 = time.perf_counter()
            await adapter_run()
            t2 = time.perf_counter()
            bare.append((t1 - t0) * 1000)
            adapter.append((t2 - t1) * 1000)
    await agent.aclose()
    if redis is not None:
        keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
    return {
        "bare_p50_ms": statistics.median(bare),
        "bare_p90_ms": pct(bare, 90),
        "adapter_p50_ms": statistics.median(adapter),
        "adapter_p90_ms": pct(adapter, 90),
        "overhead_p50_ms": statistics.median(adapter) - statistics.median(bare),
    }


def execute_body() -> bytes:
    task = Task(intent="risk_check", payload=ORDER)
    return orjson.dumps({"protocol": 1, "task": {"id": task.task_id, "intent": task.intent,
        "payload": ORDER, "tenant": None}, "attempt": 1, "time_left_ms": None,
        "traceparent": None, "idempotency_key": f"{task.task_id}:1",
        "context": {"order": ORDER}})  # fmt: skip


async def rate_of(post: Callable[[], Awaitable[None]], calls: int, in_flight: int) -> float:
    """Requests per second of ``in_flight`` lanes posting ``calls // in_flight`` each."""

    async def lane() -> None:
        for _ in range(calls // in_flight):
            await post()

    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return calls // in_flight * in_flight / (time.perf_counter() - start)


async def posts_httpx(url: str, body: bytes, calls: int, in_flight: int) -> float:
    limits = httpx.Limits(max_connections=in_flight)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(limits=limits, headers=headers) as client:

        async def post() -> None:
            (await client.post(f"{url}/v1/execute", content=body)).raise_for_status()

        return await rate_of(post, calls, in_flight)


async def posts_aiohttp(url: str, body: bytes, calls: int, in_flight: int) -> float:
    connector = aiohttp.TCPConnector(limit=in_flight)
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as client:

        async def post() -> None:
            async with client.post(f"{url}/v1/execute", data=body) as response:
                response.raise_for_status()
                await response.read()

        return await rate_of(post, calls, in_flight)


async def clients(url: str, calls: int, runs: int) -> dict[str, float]:
    body = execute_body()
    rates: dict[str, list[float]] = {}
    for _ in range(runs):
        for in_flight in (1, 8, 32):
            for name, post in (("httpx", posts_httpx), ("aiohttp", posts_aiohttp)):
                rate = await post(url, body, calls, in_flight)
                rates.setdefault(f"{name}_{in_flight}_per_s", []).append(rate)
    return {k: round(statistics.median(v)) for k, v in rates.items()}


async def path_cpu(url: str, redis_url: str, n: int, concurrency: int, batch: int) -> float:
    """CPU µs per task of the remote path alone (``--path``)."""
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from deepagents._internal.heap import freeze_startup_heap
    from deepagents.worker.agent_calls import AgentRunner

    remote = {"url": url, "batch": {"max_tasks": batch, "max_wait_ms": 0, "max_requests": 2}}
    entry = FileConfig.model_validate(
        {"agents": {"bench": {"intents": ["risk_check"], "remote": remote}}}
    ).agents["bench"]
    redis = connect(redis_url)
    prefix = f"benchpath-{os.getpid()}"
    agent = remote_agent_class("bench", entry)(redis=redis, prefix=prefix)
    await agent.introduce()
    runner = AgentRunner(agent, ThreadPoolExecutor(2))
    loop = asyncio.get_running_loop()

    async def one(task: Task) -> None:
        assert (await runner.run(task)).ok

    async def lanes(tasks: list[Task]) -> None:
        queue = iter(tasks)

        async def lane() -> None:
            for task in queue:  # each task in its own asyncio task, as a worker runs it
                await loop.create_task(one(task), context=contextvars.copy_context())

        await asyncio.gather(*(lane() for _ in range(concurrency)))

    await lanes([Task(intent="risk_check", payload={"i": i}) for i in range(2000)])  # warm
    tasks = [Task(intent="risk_check", payload={"i": i}) for i in range(n)]
    freeze_startup_heap()
    start = time.process_time()
    await lanes(tasks)
    cpu = time.process_time() - start
    await agent.aclose()
    keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()
    return cpu * 1e6 / n


DRAIN_CONFIG = """
tiers:
  p2: {{concurrency: {concurrency}, max_wait_ms: 120000}}
defaults: {{shards: 2, max_backlog: 10000000, batch_size: 100}}
agents:
  echo: {{class: "agents.echo:EchoAgent"}}
  noop: {{intents: [risk_check], remote: {{url: "{url}", max_connections: {pool},
    batch: {{max_tasks: {batch}, max_wait_ms: {wait}, max_requests: {requests}}}}}}}
"""


PULL_CONFIG = """
tiers:
  p2: {{concurrency: {concurrency}, max_wait_ms: 120000}}
defaults: {{shards: 2, max_backlog: 10000000, batch_size: 100}}
agents:
  echo: {{class: "agents.echo:EchoAgent"}}
  noop: {{intents: [risk_check], remote: {{mode: pull,
    pull: {{listen: "127.0.0.1:{port}", token_from_env: BENCH_PULL_TOKEN}}}}}}
"""
FOUR_CALLS = "can_handle,prepare_context,execute,post_process"
CONFIG_TEXT: dict[str, str] = {}  # config file -> its text (read in async code: no file I/O)


def start_node(fault: str = "", methods: str = "") -> tuple[subprocess.Popen[bytes], str]:
    node = shutil.which("node")
    if node is None:
        raise SystemExit("bench_remote: node is not installed")
    script = ROOT / "agents" / "remote" / "node" / "risk-agent.js"
    hooks = "1" if fault or methods else "0"  # RISK_AGENT_METHODS is a test hook
    env = {**os.environ, "RISK_AGENT_TEST_HOOKS": hooks, "RISK_AGENT_FAULT": fault,
           "RISK_AGENT_METHODS": methods}  # fmt: skip
    proc = subprocess.Popen([node, str(script), "--port", "0"], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    port = int(proc.stdout.readline().split()[1])
    return proc, f"http://127.0.0.1:{port}"


WORKER_WRAPPER: list[str] = []  # --worker-wrapper: a command each worker runs under


def start_worker(url: str, prefix: str, config_path: str, agent: str) -> subprocess.Popen[bytes]:
    args = ["agents.echo:EchoAgent"] if agent == "echo" else ["--remote", "noop"]
    env = {**os.environ, "DEEPAGENTS_REDIS_URL": url, "DEEPAGENTS_PREFIX": prefix,
           "DEEPAGENTS_CONFIG": config_path, "DEEPAGENTS_OUTBOX": "true"}  # fmt: skip
    return subprocess.Popen(
        [*WORKER_WRAPPER, sys.executable, "-m", "deepagents", "worker", *args], env=env, cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def cpu_s(pid: int) -> float:
    """The CPU seconds (user and system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drain_once(
    url: str, config_path: str, agent: str, n: int, run: int, service_pid: int
) -> tuple[float, float, float]:
    """Tasks per second one worker process drains for ``agent`` (echo or noop), and the CPU
    milliseconds per task the worker and the service used meanwhile: on a loaded machine
    the rate depends on what the other processes take, the CPU per task much less."""
    prefix = f"benchremote{run}{agent}-{os.getpid()}"
    config = parse_config(CONFIG_TEXT[config_path])
    settings = Settings(prefix=prefix, outbox=True)
    client = connect(url)
    intent = "echo" if agent == "echo" else "risk_check"
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        for i in range(0, n, 500):
            await orch.submit_many(
                [Task(intent=intent, payload={"i": j}) for j in range(i, min(n, i + 500))]
            )
    worker = start_worker(url, prefix, config_path, agent)
    streams = [f"{prefix}:{{{agent}:{s}}}:p2" for s in range(2)]
    try:
        while not await client.hlen(f"{prefix}:agent:{agent}:instances"):
            await asyncio.sleep(0.02)
        start = time.perf_counter()
        worker_cpu, service_cpu = cpu_s(worker.pid), cpu_s(service_pid)
        while sum([await client.xlen(s) for s in streams]):
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - start
        worker_cpu = cpu_s(worker.pid) - worker_cpu
        service_cpu = cpu_s(service_pid) - service_cpu
    finally:
        worker.terminate()
        worker.wait(30)
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for i in range(0, len(keys), 500):
            await client.delete(*keys[i : i + 500])
        await client.aclose()
    return n / elapsed, worker_cpu * 1000 / n, service_cpu * 1000 / n


def start_puller(batch: int) -> tuple[subprocess.Popen[bytes], int]:
    """The no-op Python puller, pointed at the port the pull-mode worker will listen on
    (it asks again until the worker is there)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    os.environ["BENCH_PULL_TOKEN"] = os.environ["DEEPAGENTS_PULL_TOKEN"] = "bench-pull-token"
    command = [sys.executable, "-m", "agents.remote.python.risk_puller", "--noop",
               "--worker", f"http://127.0.0.1:{port}", "--max-tasks", str(batch),
               "--wait-ms", "1000"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None
    proc.stdout.readline()  # "pulling"
    return proc, port


def start_grpc_noop(methods: str, struct: bool = False) -> tuple[subprocess.Popen[bytes], str]:
    command = [sys.executable, "-m", "agents.remote.python.risk_grpc", "--port", "0", "--noop",
               "--methods", methods or FOUR_CALLS, *(["--struct"] if struct else [])]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None
    port = int(proc.stdout.readline().split()[1])
    return proc, f"grpc://127.0.0.1:{port}"


async def drain(
    url: str,
    n: int,
    runs: int,
    pool: int,
    transport: str,
    methods: str,
    batch: int,
    wait: float,
    concurrency: int,
    requests: int,
    struct: bool = False,
) -> dict[str, Any]:
    if transport == "pull":
        proc, port = start_puller(batch)
        text = PULL_CONFIG.format(port=port, concurrency=concurrency)
    else:
        if transport == "http":
            proc, service = start_node("noop", methods)
        else:
            proc, service = start_grpc_noop(methods, struct)
        text = DRAIN_CONFIG.format(
            url=service, pool=pool, batch=batch, wait=wait, concurrency=concurrency,
            requests=requests,
        )  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    CONFIG_TEXT[f.name] = text
    echo: list[float] = []
    noop: list[float] = []
    echo_cpu: list[float] = []
    noop_cpu: list[float] = []
    service_cpu: list[float] = []
    try:
        for run in range(runs):
            order = ("echo", "noop") if run % 2 == 0 else ("noop", "echo")
            for agent in order:
                rate, worker_ms, service_ms = await drain_once(url, f.name, agent, n, run, proc.pid)
                (echo if agent == "echo" else noop).append(rate)
                if agent == "echo":
                    echo_cpu.append(worker_ms)
                else:
                    noop_cpu.append(worker_ms)
                    service_cpu.append(service_ms)
            line = {"run": run, "echo_per_s": round(echo[-1]), "noop_remote_per_s": round(noop[-1])}
            print(orjson.dumps(line).decode(), flush=True)
    finally:
        proc.kill()
        proc.wait(10)
        os.unlink(f.name)
    ratios = [r / e for r, e in zip(noop, echo, strict=True)]
    return {
        "tasks": n,
        "runs": runs,
        "transport": transport + ("+struct" if struct and transport == "grpc" else ""),
        "max_connections": pool,
        "methods": "lease" if transport == "pull" else methods or "all four",
        "batch": batch if "run_batch" in methods or transport == "pull" else None,
        "concurrency": concurrency,
        "batch_requests": requests if "run_batch" in methods else None,
        "echo_median_per_s": round(statistics.median(echo)),
        "noop_remote_median_per_s": round(statistics.median(noop)),
        "noop_over_echo_median": round(statistics.median(ratios), 3),
        "cpu_ms_per_task_echo_worker": round(statistics.median(echo_cpu), 3),
        "cpu_ms_per_task_remote_worker": round(statistics.median(noop_cpu), 3),
        "cpu_ms_per_task_service": round(statistics.median(service_cpu), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--drain", action="store_true", help="the drain benchmark instead")
    parser.add_argument("--clients", action="store_true", help="httpx against aiohttp")
    parser.add_argument("--path", action="store_true", help="the remote path's CPU per task")
    parser.add_argument(
        "--methods",
        default="",
        help="the service implements only these (execute; run; run_batch); default: the "
        "four contract methods",
    )
    parser.add_argument("--batch", type=int, default=32, help="run_batch: tasks per request")
    parser.add_argument("--batch-wait-ms", type=float, default=0.0, help="run_batch: max wait")
    parser.add_argument(
        "--batch-requests", type=int, default=2, help="run_batch: batches in flight at most"
    )
    parser.add_argument(
        "--concurrency", type=int, default=100, help="--drain: the tier's, for both agents"
    )
    parser.add_argument(
        "--breaker", action="store_true", help="overhead with the fleet's breaker (Redis)"
    )
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-connections", type=int, default=8, help="the remote's pool")
    parser.add_argument(
        "--transport",
        choices=("http", "grpc", "pull"),
        default="http",
        help="the no-op service: the Node agent over HTTP, the Python one over gRPC, or the "
        "Python puller in pull mode (leasing up to --batch tasks per call)",
    )
    parser.add_argument(
        "--struct",
        action="store_true",
        help="--transport grpc: the service does not declare json_bytes, so the worker sends "
        "Structs (as to a service older than the JSON form)",
    )
    parser.add_argument(
        "--worker-wrapper",
        default="",
        help='--drain: a command each worker process runs under, e.g. "valgrind '
        '--tool=callgrind --callgrind-out-file=/tmp/cg.%%p --log-file=/tmp/cg.%%p.log" '
        "(instructions per task: the difference of two drains' counts over their tasks)",
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("DEEPAGENTS_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    args = parser.parse_args()
    WORKER_WRAPPER[:] = shlex.split(args.worker_wrapper)
    if args.drain:
        print(
            orjson.dumps(
                asyncio.run(
                    drain(
                        args.redis_url,
                        args.tasks,
                        args.runs,
                        args.max_connections,
                        args.transport,
                        args.methods,
                        args.batch,
                        args.batch_wait_ms,
                        args.concurrency,
                        args.batch_requests,
                        args.struct,
                    )
                )
            ).decode()
        )
        return
    if args.path:
        import uvloop

        if args.transport == "grpc":
            proc, url = start_grpc_noop("run_batch", args.struct)
        else:
            proc, url = start_node("noop", "run_batch")
        try:
            for _ in range(args.runs):
                us = uvloop.run(
                    path_cpu(url, args.redis_url, args.tasks, args.concurrency, args.batch)
                )
                print(orjson.dumps({"tasks": args.tasks, "cpu_us_per_task": round(us, 1)}).decode())
        finally:
            proc.kill()
            proc.wait(10)
        return
    if args.clients:
        proc, url = start_node()
        try:
            rates = asyncio.run(clients(url, args.calls, args.runs))
        finally:
            proc.kill()
            proc.wait(10)
        print(orjson.dumps({"calls": args.calls, "runs": args.runs} | rates).decode())
        return
    proc, url = start_node(methods=args.methods or FOUR_CALLS)
    try:
        redis_url = args.redis_url if args.breaker else None
        figures = asyncio.run(bench(url, args.calls, redis_url, args.methods))
    finally:
        proc.kill()
        proc.wait(10)
    print(
        orjson.dumps(
            {"calls": args.calls, "breaker": args.breaker, "methods": args.methods or "all four"}
            | {k: round(v, 3) for k, v in figures.items()}
        ).decode()
    )


if __name__ == "__main__":
    main()
