"""The worker's instructions per task, counted by callgrind: repeatable where CPU time on
these shared VMs moves by a third from one run to the next.

    .venv/bin/python loadtests/bench_instructions.py --tasks 5000
    .venv/bin/python loadtests/bench_instructions.py --tasks 3000 --keep /tmp/worker.cg

A fresh embedded Redis; ``deepagents worker agents.echo:EchoAgent`` (the full protocol,
as ``bench_core.py``) started under ``valgrind --tool=callgrind``. Once it is registered
and idle: its counters are zeroed, it is stopped (``SIGSTOP``), N tasks are submitted,
it is continued, and when the backlog is drained its counters are dumped. Printed: the
worker's instructions per task (Ir). Under callgrind the worker runs some 50 times slower
than Redis and this harness, so it always finds full batches: compare two trees with
this script rather than against ``bench_core.py``'s CPU times.

To compare two commits, run it from a ``git worktree`` of each. It needs valgrind
(Debian's ``valgrind`` package).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from bench_core import CONFIG, REPO, backlog, wait_registered

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def summary(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


async def measure(url: str, n: int, out_dir: Path) -> Path:
    prefix = f"instr{os.getpid()}"
    config_path = out_dir / "config.yaml"
    config_path.write_text(CONFIG)
    env = {
        **os.environ,
        "DEEPAGENTS_REDIS_URL": url,
        "DEEPAGENTS_PREFIX": prefix,
        "DEEPAGENTS_CONFIG": str(config_path),
        "DEEPAGENTS_OUTBOX": "true",
    }
    worker = subprocess.Popen(  # noqa: ASYNC220 - a harness, not a service
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out_dir}/callgrind.out.%p",
            sys.executable,
            "-m",
            "deepagents",
            "worker",
            "agents.echo:EchoAgent",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = connect(url)
    try:
        await asyncio.wait_for(wait_registered(client, prefix), 300)
        control("-z", str(worker.pid))  # count from here
        os.kill(worker.pid, signal.SIGSTOP)  # so that it finds the whole backlog at once
        settings = Settings(prefix=prefix)
        async with Orchestrator.from_client(
            client, config=parse_config(CONFIG), settings=settings
        ) as orch:
            for i in range(0, n, 500):
                batch = [Task(intent="echo", payload={"i": j}) for j in range(i, min(n, i + 500))]
                await orch.submit_many(batch)
        os.kill(worker.pid, signal.SIGCONT)
        deadline = time.monotonic() + 1800
        while await backlog(client, prefix):
            if time.monotonic() > deadline:
                raise RuntimeError("the worker did not drain within 30 minutes")
            await asyncio.sleep(0.2)
        control("-d", str(worker.pid))
        dumps = sorted(out_dir.glob(f"callgrind.out.{worker.pid}.*"))  # noqa: ASYNC240
        if not dumps:
            raise RuntimeError("callgrind wrote no dump")
        return dumps[-1]
    finally:
        worker.send_signal(signal.SIGCONT)
        worker.terminate()
        try:
            worker.wait(120)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(30)
        await client.aclose()


def main(args: argparse.Namespace) -> None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("needs valgrind (apt-get install valgrind)")
    out_dir = Path(tempfile.mkdtemp(prefix="deepagents-callgrind-"))
    try:
        with EmbeddedRedis() as server:
            dump = asyncio.run(measure(server.url, args.tasks, out_dir))
        per_task = summary(dump) / args.tasks
        print(orjson.dumps({"tasks": args.tasks, "worker_ir_per_task": round(per_task)}).decode())
        if args.keep:
            shutil.copy(dump, args.keep)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument(
        "--keep", metavar="FILE", help="copy the dump there, for callgrind_annotate FILE"
    )
    main(parser.parse_args())
