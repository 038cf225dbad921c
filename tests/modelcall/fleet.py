"""Start worker processes (tests/modelcall/proc_calls.py), release them together, collect."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

from tests.support.wait import eventually

ROOT = Path(__file__).resolve().parents[2]


async def run_fleet(
    client: Redis, spec: dict[str, Any], processes: int, env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    prefix = spec["prefix"]
    spec = {**spec, "ready_key": f"{prefix}:test:ready", "go_key": f"{prefix}:test:go"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.modelcall.proc_calls", orjson.dumps(spec).decode()],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        for _ in range(processes)
    ]
    try:

        async def ready() -> bool:
            return int(await client.get(spec["ready_key"]) or 0) >= processes

        await eventually(ready, timeout=60, what="worker processes ready")
        await client.set(spec["go_key"], 1)
        outputs = await asyncio.gather(
            *(asyncio.to_thread(p.communicate, timeout=120) for p in procs)
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    summaries = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()[-3000:]
        summaries.append(orjson.loads(out.splitlines()[-1]))
    return summaries
