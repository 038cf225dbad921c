"""docs/quickstart.md and docs/howto/dead-letters.md run as written: their files and
commands are read from the pages, so a page cannot drift from what works. (The quickstart's
Redis is the test's: its `export DEEPAGENTS_REDIS_URL` line is left out.)"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
from redis.asyncio import Redis

from tests.cli.support import REPO, clean_env

FIRST_DEAD = 'import json; print(json.load(open("dead.json"))[0]["{}"])'
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def blocks(page: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = BLOCK.findall((REPO / "docs" / page).read_text())
    return found


def write_files(page: str, where: Path) -> None:
    """Each python/yaml block, to the file its first line names (the first block wins: a
    later one shows the same file grown)."""
    for lang, code in blocks(page):
        name = code.splitlines()[0].removeprefix("# ").strip()
        if lang in ("python", "yaml") and not (where / name).exists():
            (where / name).write_text(code)


def bash_lines(page: str, *starts: str) -> list[str]:
    """The page's bash lines that begin with one of ``starts``, in page order."""
    lines = [line for lang, code in blocks(page) if lang == "bash" for line in code.splitlines()]
    return [line for line in lines if line.startswith(starts)]


async def run(script: str, where: Path, redis_url: str, prefix: str) -> list[str]:
    env = clean_env(DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_PREFIX=prefix)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # No worker outlives the script, nor writes after it: the test's keys are deleted next.
    guarded = "set -uo pipefail\ntrap 'kill -9 $(jobs -p) 2>/dev/null; wait' EXIT\n" + script
    done = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", guarded],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


async def test_the_quickstart_agent_runs_as_written(
    tmp_path: Path, redis_url: str, prefix: str, client: Redis
) -> None:
    write_files("quickstart.md", tmp_path)
    setup = bash_lines("quickstart.md", "export PYTHONPATH", "deepagents worker")
    publish = bash_lines("quickstart.md", "deepagents publish --intent greet")
    assert len(setup) == 2 and len(publish) == 2, (setup, publish)
    good, bad = publish
    out = await run(
        "\n".join([*setup, good, bad.split("#")[0] + "; echo refused=$?"]),
        tmp_path,
        redis_url,
        prefix,
    )
    result = orjson.loads(out[0])
    assert (result["status"], result["output"]) == ("success", {"text": "Hello, Ada!"})
    assert out[-1] == "refused=1"


async def test_the_dead_letter_howto_runs_as_written(
    tmp_path: Path, redis_url: str, prefix: str, client: Redis
) -> None:
    page = "howto/dead-letters.md"
    write_files(page, tmp_path)
    setup = bash_lines(page, "export ", "deepagents worker")
    (publish,) = bash_lines(page, "deepagents publish")
    (replay,) = bash_lines(page, "deepagents dlq replay")
    (result,) = bash_lines(page, "deepagents result")
    documented_entry, documented_task = replay.split()[3], result.split()[2]
    # The page's ids are one run's; this run's come from `dlq list --json`.
    script = "\n".join(
        [
            *setup,
            publish + "; echo published=$?",
            "deepagents dlq list --json > dead.json",
            f"ENTRY=$(python -c '{FIRST_DEAD.format('entry_id')}')",
            f"TASK=$(python -c '{FIRST_DEAD.format('task_id')}')",
            replay.replace(documented_entry, "$ENTRY"),
            result.replace(documented_task, "$TASK"),
            "deepagents dlq list --json",
        ]
    )
    out = await run(script, tmp_path, redis_url, prefix)
    failed = orjson.loads(out[0])
    assert failed["status"] == "failed" and failed["error"]["code"] == "dead_lettered"
    assert failed["metrics"]["attempts"] == 3
    assert out[1] == "published=3"
    assert out[2].startswith("replayed ")
    replayed = orjson.loads(out[3])
    assert replayed["task_id"] == failed["task_id"]
    assert (replayed["status"], replayed["output"]) == ("success", {"ok": True})
    assert orjson.loads("".join(out[4:])) == []
