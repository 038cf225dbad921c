"""Benchmarks of the console and the task-event stream, against a fresh embedded Redis, one
gateway process and one worker process (``tests.support.asking:MixedAgent``: a task with
``payload.ask`` waits for a person):

    .venv/bin/python loadtests/bench_console.py --waiting 100000 --mine 10000 --runs 3

1. **idle**: Redis's CPU over ``--idle-s`` with the gateway and the worker idle, then the
   same with Debian's Chromium showing the console's Queues page (it reloads itself every
   5 s) and a waiting task's page, paired in the same run: the console's share of a core;
2. **sse**: ``--subscribers`` concurrent ``GET /v1/tasks/{id}/events`` streams (one
   client process, aiohttp) on ``--sse-tasks`` waiting tasks, held ``--idle-s``: the
   gateway's RSS before and after and its CPU while they are open, per subscriber; and
   Redis's CPU meanwhile (each follower reads its shard's outbox once a second when idle);
3. **inbox**: ``--waiting`` tasks parked across 10 tenants, ``--mine`` of them tenant t0's;
   then wrk on ``GET /ui/inbox`` signed in as t0 (the cookie), on its first page and on its
   last (reached by following the pages' "next" links, 100 questions a page), paired in
   each of ``--runs`` runs of ``--wrk-s`` s at ``--connections``: requests/s, p50/p95/p99
   (wrk's own histogram, ``loadtests/wrk_latency.lua``);
4. **answer**: ``--answers`` of t0's tasks answered one after the other by the console's own
   form post (``POST /ui/tasks/{id}/reply``, the request the browser sends: cookie, CSRF
   token, same-origin ``Origin``), each timed from the post until its task hash says
   ``running`` or ``done`` (read every 2 ms): the task running again.

Prints one JSON object per phase; ``--phases`` picks them.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from deepagents._internal.redis_server import EmbeddedRedis, free_port
from deepagents.gateway.auth import hash_key, new_key
from deepagents.gateway.console_session import COOKIE, csrf_token
from deepagents.transport.redis_streams import connect

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.asking: the agent the config names
CHROMIUM = "/usr/bin/chromium"
TENANTS = [f"t{i}" for i in range(10)]
SHARDS = 4
BATCH = 500  # tasks per POST /v1/tasks/batch while parking
HZ = os.sysconf("SC_CLK_TCK")


def config_text(keys: dict[str, str]) -> str:
    api_keys = "\n".join(
        f"    - {{tenant: {t}, sha256: {hash_key(k)}, name: {t}}}" for t, k in keys.items()
    )
    return f"""
tiers:
  p0: {{concurrency: 5, max_wait_ms: 60000}}
  p2: {{concurrency: 100, max_wait_ms: 3600000}}
default_tier: p2
defaults: {{shards: {SHARDS}, max_backlog: 10000000, batch_size: 100}}
agents:
  mixed: {{class: "tests.support.asking:MixedAgent"}}
gateway:
  api_keys:
{api_keys}
  max_batch: {BATCH}
  defaults: {{rate_per_s: 1000000, burst: 1000000, max_in_flight: 100000}}
"""


def ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


class Deployment:
    def __init__(self, url: str, prefix: str, outbox: bool) -> None:
        self.url, self.prefix = url, prefix
        self.keys = {t: new_key() for t in TENANTS}
        self.dir = Path(tempfile.mkdtemp(prefix="deepagents-console-bench-"))
        self.config = self.dir / "config.yaml"
        self.config.write_text(config_text(self.keys))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DEEPAGENTS_REDIS_URL": url,
            "DEEPAGENTS_PREFIX": prefix,
            "DEEPAGENTS_CONFIG": str(self.config),
            "DEEPAGENTS_OUTBOX": "true" if outbox else "false",
            "PYTHONPATH": str(REPO),
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        py = sys.executable
        self.gateway = self._spawn([py, "-m", "deepagents", "gateway", "--port", str(self.port)])
        self.worker = self._spawn(
            [py, "-m", "deepagents", "worker", "tests.support.asking:MixedAgent"]
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the gateway did not start")

    def _spawn(self, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.dir / f"{argv[3]}.log").open("wb")
        proc = subprocess.Popen(argv, env=self.env, cwd=REPO, stdout=log, stderr=log)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()

    def cookie(self, tenant: str = "t0") -> str:
        return f"{COOKIE}={self.keys[tenant]}"


async def park(d: Deployment, client: Any, counts: dict[str, int]) -> list[str]:
    """Submit tasks that ask through the gateway (``POST /v1/tasks/batch``, each tenant with
    its key: the owner records the console reads), ``counts[tenant]`` each, interleaved,
    until all wait; t0's ids."""
    mine: list[str] = []
    left = dict(counts)
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=d.base, timeout=120) as http:
        while any(left.values()):
            for tenant in TENANTS:
                n = min(BATCH, left.get(tenant, 0))
                if not n:
                    continue
                left[tenant] -= n
                body = {"tasks": [{"intent": "mixed", "payload": {"ask": True}}] * n}
                r = await http.post(
                    "/v1/tasks/batch",
                    json=body,
                    headers={"Authorization": f"Bearer {d.keys[tenant]}"},
                )
                r.raise_for_status()
                if tenant == "t0":
                    mine += [t["task_id"] for t in r.json()["tasks"]]
    total = sum(counts.values())
    while True:
        pipe = client.pipeline(transaction=False)
        for shard in range(SHARDS):
            pipe.zcard(f"{d.prefix}:{{mixed:{shard}}}:waiting")
        n = sum(int(x) for x in await pipe.execute())
        if n >= total:
            break
        await asyncio.sleep(0.2)
    print(f"# parked {total} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return mine


async def redis_cpu_over(redis_pid: int, seconds: float) -> float:
    """Redis's CPU over ``seconds``, as a share of one core."""
    r0, t0 = ticks(redis_pid), time.monotonic()
    await asyncio.sleep(seconds)
    return (ticks(redis_pid) - r0) / HZ / (time.monotonic() - t0)


async def idle_phase(d: Deployment, redis_pid: int, task_id: str, seconds: float) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    baseline = await redis_cpu_over(redis_pid, seconds)
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox"]
        )
        ctx = await browser.new_context()
        await ctx.add_cookies([{"name": COOKIE, "value": d.keys["t0"], "url": d.base}])
        queues = await ctx.new_page()
        await queues.goto(d.base + "/ui/queues")
        task = await ctx.new_page()
        await task.goto(f"{d.base}/ui/tasks/{task_id}")
        with_console = await redis_cpu_over(redis_pid, seconds)
        await browser.close()
    return {
        "phase": "idle",
        "seconds": seconds,
        "redis_cpu_idle_pct": round(baseline * 100, 3),
        "redis_cpu_console_open_pct": round(with_console * 100, 3),
        "console_share_pct": round((with_console - baseline) * 100, 3),
    }


SSE_CLIENT = r"""
import asyncio, sys, aiohttp
base, key, n, hold = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
ids = sys.argv[5].split(",")
async def one(session, i, opened):
    async with session.get(f"{base}/v1/tasks/{ids[i % len(ids)]}/events",
                           headers={"Authorization": f"Bearer {key}"}) as r:
        assert r.status == 200, r.status
        await r.content.readline()
        opened.append(i)
        async for _ in r.content:
            pass
async def main():
    opened = []
    conn = aiohttp.TCPConnector(limit=0)
    forever = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=conn, timeout=forever) as s:
        tasks = [asyncio.create_task(one(s, i, opened)) for i in range(n)]
        while len(opened) < n:
            await asyncio.sleep(0.1)
            for t in tasks:
                if t.done() and t.exception():
                    raise t.exception()
        print("open", flush=True)
        await asyncio.sleep(hold)
        for t in tasks:
            t.cancel()
asyncio.run(main())
"""


def sse_phase(
    d: Deployment, redis_pid: int, task_ids: list[str], n: int, seconds: float
) -> dict[str, Any]:
    gw = d.gateway.pid
    rss0 = rss_kb(gw)
    g_idle0, r_idle0, t_idle0 = ticks(gw), ticks(redis_pid), time.monotonic()
    time.sleep(seconds / 2)
    idle_s = time.monotonic() - t_idle0
    g_idle, r_idle = (ticks(gw) - g_idle0) / HZ / idle_s, (ticks(redis_pid) - r_idle0) / HZ / idle_s
    client = subprocess.Popen(
        [sys.executable, "-c", SSE_CLIENT, d.base, d.keys["t0"], str(n), str(seconds + 30),
         ",".join(task_ids)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    opened_at = time.monotonic()
    assert client.stdout is not None
    line = client.stdout.readline()
    if line.strip() != b"open":
        raise RuntimeError(f"the SSE client failed: {line!r}")
    opening_s = time.monotonic() - opened_at
    time.sleep(3)  # the first reads of every follower settle
    rss1 = rss_kb(gw)
    g0, r0, t0 = ticks(gw), ticks(redis_pid), time.monotonic()
    time.sleep(seconds)
    held = time.monotonic() - t0
    g_cpu, r_cpu = (ticks(gw) - g0) / HZ / held, (ticks(redis_pid) - r0) / HZ / held
    client.terminate()
    client.wait(30)
    return {
        "phase": "sse",
        "subscribers": n,
        "seconds": seconds,
        "opening_s": round(opening_s, 2),
        "gateway_rss_mb": [round(rss0 / 1024, 1), round(rss1 / 1024, 1)],
        "rss_per_subscriber_kb": round((rss1 - rss0) / n, 1),
        "gateway_cpu_idle_pct": round(g_idle * 100, 2),
        "gateway_cpu_pct": round(g_cpu * 100, 2),
        "cpu_per_subscriber_pct_of_core": round((g_cpu - g_idle) * 100 / n, 4),
        "redis_cpu_idle_pct": round(r_idle * 100, 2),
        "redis_cpu_pct": round(r_cpu * 100, 2),
    }


def wrk_inbox(d: Deployment, seconds: int, connections: int, path: str) -> dict[str, Any]:
    out = subprocess.run(
        ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
         "-s", str(REPO / "loadtests" / "wrk_latency.lua"),
         "-H", f"Cookie: {d.cookie()}", f"{d.base}{path}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
    return dict(orjson.loads(line))


def last_inbox_page(d: Deployment) -> tuple[str, int]:
    """The path of the inbox's last page, and how many pages there are: each page's "next"
    link followed from the first."""
    path, pages = "/ui/inbox", 1
    with httpx.Client(base_url=d.base, timeout=60, headers={"Cookie": d.cookie()}) as http:
        while True:
            r = http.get(path)
            r.raise_for_status()
            found = re.search(r'<a rel="next" href="([^"]+)"', r.text)
            if found is None:
                return path, pages
            path, pages = html.unescape(found.group(1)), pages + 1


async def answer_phase(d: Deployment, client: Any, prefix: str, ids: list[str]) -> dict[str, Any]:
    token = csrf_token(d.keys["t0"])
    took: list[float] = []
    async with httpx.AsyncClient(base_url=d.base, timeout=30) as http:
        for task_id in ids:
            location = await client.get(f"{prefix}:loc:{task_id}")
            agent, shard, _ = location.decode().split("|")
            task_key = f"{prefix}:{{{agent}:{shard}}}:t:{task_id}"
            page = await http.get(f"/ui/tasks/{task_id}", headers={"Cookie": d.cookie()})
            assert page.status_code == 200 and 'name="ask" value="1"' in page.text
            form = {"csrf": token, "ask": "1", "f.approved": "true", "action": "respond"}
            sent = time.perf_counter()
            r = await http.post(
                f"/ui/tasks/{task_id}/reply",
                data=form,
                headers={"Cookie": d.cookie(), "Origin": d.base},
            )
            assert r.status_code == 303, (r.status_code, r.text[:300])
            while True:
                state = await client.hget(task_key, "state")
                if state in (b"running", b"done"):
                    break
                await asyncio.sleep(0.002)
            took.append((time.perf_counter() - sent) * 1000)
    took.sort()
    return {
        "phase": "answer",
        "answers": len(took),
        "p50_ms": round(statistics.median(took), 1),
        "p95_ms": round(took[int(len(took) * 0.95) - 1], 1),
        "max_ms": round(took[-1], 1),
    }


async def main(args: argparse.Namespace) -> None:
    phases = set(args.phases.split(","))
    with EmbeddedRedis() as server:
        assert server.process is not None
        redis_pid = server.process.pid
        client = connect(server.url)
        try:
            if phases & {"idle", "sse"}:
                await small_deployment(server.url, client, redis_pid, args, phases)
            if phases & {"inbox", "answer"}:
                await large_deployment(server.url, client, args, phases)
        finally:
            await client.aclose()


async def small_deployment(
    url: str, client: Any, redis_pid: int, args: argparse.Namespace, phases: set[str]
) -> None:
    d = Deployment(url, "bsse", outbox=True)
    d.start()
    try:
        ids = await park(d, client, {"t0": args.sse_tasks})
        print(f"# load average {loadavg()}", file=sys.stderr)
        if "idle" in phases:
            print(orjson.dumps(await idle_phase(d, redis_pid, ids[0], args.idle_s)).decode())
        if "sse" in phases:
            result = sse_phase(d, redis_pid, ids, args.subscribers, args.idle_s)
            print(orjson.dumps(result).decode())
    finally:
        d.stop()


async def large_deployment(
    url: str, client: Any, args: argparse.Namespace, phases: set[str]
) -> None:
    d = Deployment(url, "binbox", outbox=False)
    d.start()
    try:
        others = (args.waiting - args.mine) // (len(TENANTS) - 1)
        counts = {t: (args.mine if t == "t0" else others) for t in TENANTS}
        mine = await park(d, client, counts)
        print(f"# load average {loadavg()}", file=sys.stderr)
        if "inbox" in phases:
            last, pages = last_inbox_page(d)
            wrk_inbox(d, 2, args.connections, "/ui/inbox")  # warm-up
            runs = [
                {where: wrk_inbox(d, args.wrk_s, args.connections, path)
                 for where, path in (("first", "/ui/inbox"), ("last", last))}
                for _ in range(args.runs)
            ]  # fmt: skip
            print(orjson.dumps({"phase": "inbox", "pages": pages, "runs": runs, **{
                f"{where}_page_median_p95_ms": statistics.median(r[where]["p95_ms"] for r in runs)
                for where in ("first", "last")}}).decode())  # fmt: skip
        if "answer" in phases:
            print(
                orjson.dumps(await answer_phase(d, client, d.prefix, mine[: args.answers])).decode()
            )
        print(f"# load average {loadavg()}", file=sys.stderr)
    finally:
        d.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", default="idle,sse,inbox,answer")
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--mine", type=int, default=10_000)
    parser.add_argument("--sse-tasks", type=int, default=100)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--wrk-s", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--answers", type=int, default=200)
    asyncio.run(main(parser.parse_args()))
