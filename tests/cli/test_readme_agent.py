"""Issue 24 item 9: the README's "Your first agent" runs as written. The code is read from
README.md itself, so the section cannot drift from what works."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
from redis.asyncio import Redis

from tests.cli.support import REPO, clean_env, deepagents, one_line_error

BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def section_blocks() -> list[tuple[str, str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Your first agent\n")
    end = text.index("\n## ", start + 1)
    return BLOCK.findall(text[start:end])


def write_files(blocks: list[tuple[str, str]], where: Path) -> str:
    """Write each python/yaml block to the file its first line names; return the bash."""
    bash = []
    for lang, code in blocks:
        if lang == "bash":
            bash.append(code)
            continue
        name = code.splitlines()[0].removeprefix("# ").strip()
        (where / name).write_text(code, encoding="utf-8")
    assert len(bash) == 1, blocks
    return bash[0]


def test_the_agent_is_short() -> None:
    (python,) = [code for lang, code in section_blocks() if lang == "python"]
    assert len(python.strip().splitlines()) <= 20


async def test_the_section_runs_as_written(
    tmp_path: Path, redis_url: str, prefix: str, client: Redis
) -> None:
    script = write_files(section_blocks(), tmp_path)
    bin_dir = str(Path(sys.executable).parent)  # where `deepagents` is installed
    env = clean_env(DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_PREFIX=prefix)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    # Whatever happens, no worker outlives the script, nor writes after it: ``client``
    # deletes the test's keys next.
    guarded = "set -euo pipefail\ntrap 'kill -9 $(jobs -p) 2>/dev/null; wait' EXIT\n" + script
    done = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", guarded],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "success", result
    assert result["output"] == {"text": "Hello, Ada!"}
    assert result["agent"] == "greeter"

    # "A payload without `name` is refused before anything is enqueued."
    env.update(DEEPAGENTS_CONFIG="greeter.yaml", PYTHONPATH=".")
    args = ("publish", "--intent", "greet", "--payload", "{}")
    refused = await asyncio.to_thread(deepagents, *args, env=env, cwd=tmp_path)
    one_line_error(refused, 1, "name")
    streams = [k async for k in client.scan_iter(match=f"{prefix}:{{greeter:*}}:p*")]
    lengths = [await client.xlen(k) for k in streams]
    assert sum(lengths) == 0  # the good task was consumed; the bad one never enqueued
