"""Fair share with a stream per fairness key: what its Redis work would cost, before building it.

Today a fair tier holds its tasks in a sorted set and the release script ``XADD``s each one
into the tier stream at its turn (docs/design.md, "Fair share inside a tier"). The layout
measured here puts each task into a stream of its key at submit (same hash tag), and reads
the key streams in turn. Nothing here is product code: the bus's scripts, driven directly.

Part 1, the read alone (``read``): ``--tasks`` entries queued, then read 100 at a time until
none is left, the server's CPU time per entry (``INFO cpu``):

- ``plain``: ``XREADGROUP COUNT 100`` on one stream (a tier without fair share);
- ``plain_via_lua``: the same command inside a script that returns its reply;
- ``keys_native``: ten key streams, one ``XREADGROUP COUNT 10`` naming all ten;
- ``keys_lua_turn``: ten key streams, a script that picks each key's share by weighted turn
  (virtual times in a sorted set) and runs an ``XREADGROUP`` per key.

Part 2, the drain's Redis work (``drain``): one loop playing a worker with a no-op agent:
read 100, begin them (``begin.lua``), commit them (``commit.lua``), until ``--tasks`` of ten
tenants are done. The drain is sequential, so the wall clock is server plus client time:

- ``plain``: one tier stream, as a tier without fair share;
- ``release``: today's fair tier (``enqueue_many`` with a ``Fairness``, ``read_fair``: the
  release script, and a native ``XREADGROUP`` behind it in the same round trip);
- ``release_read_in_lua``: the same with the read inside the script, its reply returned
  through Lua (as ``release.lua`` did before);
- ``keys_per_stream``: a stream per key, read natively as above, begun and committed with
  one script call per key stream (the bus's calls as they are);
- ``keys_per_lane``: the same, begun and committed with one call per batch over every key
  stream of the batch (variants of ``begin.lua`` and ``commit.lua`` built below, taking a
  stream index per entry);
- ``plain_lane_scripts``: ``plain`` begun and committed with those variants (one stream):
  what the variants cost by themselves;
- ``keys_per_lane_runs``: ``keys_per_lane`` with each stream's entries in one run (a count
  per stream, no argument per entry added).

    .venv/bin/python loadtests/bench_fair_layout.py --tasks 20000 --rounds 7
    # the drain's server time by command (INFO commandstats), plain order and the release:
    .venv/bin/python loadtests/bench_fair_layout.py --parts drain --ways plain,release --commands

Runs redis-servers of its own; prints JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.contract import Task
from deepagents.contract.codec import encode_task
from deepagents.transport.base import BeginItem, CommitItem, Enqueue, Fairness, RawEntry, StreamRef
from deepagents.transport.keys import ShardKeys
from deepagents.transport.redis_streams import connect
from deepagents.transport.redis_streams.bus import RedisStreamBus

LUA = Path(__file__).resolve().parent.parent / "deepagents" / "transport" / "redis_streams" / "lua"
TENANTS = "ABCDEFGHIJ"
GROUP, CONSUMER = "noop", "c1"
RESULT = b'{"output":null,"status":"ok"}'
BATCH = 100

PLAIN_VIA_LUA = """
return redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                  'STREAMS', KEYS[1], '>')
"""

# KEYS[1] active keys (score: the key's next virtual start), ARGV[1] group, [2] consumer,
# [3] count, [4] key streams' prefix. Equal weights here: the turn's cost, not its policy.
LUA_TURN = """
local count = tonumber(ARGV[3])
local act = redis.call('ZRANGE', KEYS[1], 0, count - 1, 'WITHSCORES')
local keys, vt, n = {}, {}, {}
for i = 1, #act, 2 do
  local k = act[i]; keys[#keys + 1] = k; vt[k] = tonumber(act[i + 1]); n[k] = 0
end
for _ = 1, (#keys > 0 and count or 0) do
  local best, bv
  for j = 1, #keys do
    local k = keys[j]
    if not bv or vt[k] < bv then best, bv = k, vt[k] end
  end
  n[best] = n[best] + 1; vt[best] = bv + 1
end
local out = {}
for j = 1, #keys do
  local k = keys[j]
  if n[k] > 0 then
    local got = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', n[k],
                           'STREAMS', ARGV[4] .. k, '>')
    local ents = got and got[1][2] or {}
    if #ents > 0 then out[#out + 1] = {ARGV[4] .. k, ents} end
    if #ents < n[k] then redis.call('ZREM', KEYS[1], k)
    else redis.call('ZADD', KEYS[1], vt[k], k) end
  end
end
return out
"""


def _swap(text: str, old: str, new: str) -> str:
    if old not in text:
        raise SystemExit(f"the script changed: {old!r} not found; update this bench")
    return text.replace(old, new)


def lane_begin() -> str:
    """``begin.lua`` over several streams: KEYS[1] outbox, KEYS[2..ns+1] streams, then the
    task hashes; ARGV[5] ns, and per entry its stream's index before its id."""
    text = (LUA / "begin.lua").read_text()
    text = text[text.index("local fresh") :]
    text = _swap(
        text,
        "for i = 3, #KEYS do\n  local base = 5 + (i - 3) * 3\n"
        "  local id, attempt, event = ARGV[base], ARGV[base + 1], ARGV[base + 2]",
        "local ns = tonumber(ARGV[5])\nfor i = ns + 2, #KEYS do\n"
        "  local base = 6 + (i - ns - 2) * 4\n  local s = KEYS[1 + tonumber(ARGV[base])]\n"
        "  local id, attempt, event = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]",
    )
    for command in ("XPENDING", "XACK", "XDEL"):
        text = _swap(text, f"redis.call('{command}', KEYS[1]", f"redis.call('{command}', s")
    return _swap(text, "redis.call('XADD', KEYS[2]", "redis.call('XADD', KEYS[1]")


def _acks_per_stream(text: str) -> str:
    """The rest of a several-stream ``commit.lua`` (its loop already picks ``si`` and ``s``
    per entry): each entry checked in its own stream's PEL, acks and deletes once per stream
    of the batch."""
    text = _swap(text, "redis.call('XPENDING', KEYS[1]", "redis.call('XPENDING', s")
    text = _swap(
        text,
        "done[#done + 1] = id",
        "local d = done[si]\n    if not d then d = {}; done[si] = d end\n    d[#d + 1] = id",
    )
    text = _swap(
        text,
        "if #done > 0 then\n  redis.call('XACK', KEYS[1], ARGV[1], unpack(done))\n"
        "  redis.call('XDEL', KEYS[1], unpack(done))\nend",
        "for si, d in pairs(done) do\n  redis.call('XACK', KEYS[1 + si], ARGV[1], unpack(d))\n"
        "  redis.call('XDEL', KEYS[1 + si], unpack(d))\nend",
    )
    return _swap(text, "redis.call('XADD', KEYS[2]", "redis.call('XADD', KEYS[1]")


def lane_commit() -> str:
    """``commit.lua`` over several streams, laid out as ``lane_begin``'s (then the step
    records' keys); acks and deletes once per stream of the batch."""
    text = (LUA / "commit.lua").read_text()
    text = text[text.index("local out, done") :]
    text = _swap(
        text,
        "local n = (#KEYS - 2) / 2\nfor i = 3, n + 2 do\n  local base = 5 + (i - 3) * 4\n"
        "  local id, result, reply, ev = ARGV[base], ARGV[base + 1], ARGV[base + 2], "
        "ARGV[base + 3]",
        "local ns = tonumber(ARGV[5])\nlocal n = (#KEYS - 1 - ns) / 2\n"
        "for i = ns + 2, ns + n + 1 do\n  local base = 6 + (i - ns - 2) * 5\n"
        "  local si = tonumber(ARGV[base])\n  local s = KEYS[1 + si]\n"
        "  local id, result, reply, ev = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], "
        "ARGV[base + 4]",
    )
    return _acks_per_stream(text)


# The same two scripts with each stream's entries in one run: ARGV[5] ns, then ns counts
# (entries per stream, in the order of the streams' keys), then the entries as the
# one-stream scripts take them. No argument per entry added.
RUNS_HEAD = """local ns = tonumber(ARGV[5])
local si, left = 0, 0
local function next_stream()
  while left == 0 do si = si + 1; left = tonumber(ARGV[5 + si]) end
  left = left - 1
  return si
end
"""


def lane_begin_runs() -> str:
    text = (LUA / "begin.lua").read_text()
    text = text[text.index("local fresh") :]
    text = _swap(
        text,
        "for i = 3, #KEYS do\n  local base = 5 + (i - 3) * 3\n"
        "  local id, attempt, event = ARGV[base], ARGV[base + 1], ARGV[base + 2]",
        RUNS_HEAD + "for i = ns + 2, #KEYS do\n"
        "  local base = 6 + ns + (i - ns - 2) * 3\n  local s = KEYS[1 + next_stream()]\n"
        "  local id, attempt, event = ARGV[base], ARGV[base + 1], ARGV[base + 2]",
    )
    for command in ("XPENDING", "XACK", "XDEL"):
        text = _swap(text, f"redis.call('{command}', KEYS[1]", f"redis.call('{command}', s")
    return _swap(text, "redis.call('XADD', KEYS[2]", "redis.call('XADD', KEYS[1]")


def lane_commit_runs() -> str:
    text = (LUA / "commit.lua").read_text()
    text = text[text.index("local out, done") :]
    text = _swap(
        text,
        "local n = (#KEYS - 2) / 2\nfor i = 3, n + 2 do\n  local base = 5 + (i - 3) * 4\n"
        "  local id, result, reply, ev = ARGV[base], ARGV[base + 1], ARGV[base + 2], "
        "ARGV[base + 3]",
        RUNS_HEAD + "local n = (#KEYS - 1 - ns) / 2\n"
        "for i = ns + 2, ns + n + 1 do\n  local base = 6 + ns + (i - ns - 2) * 4\n"
        "  local si = next_stream()\n  local s = KEYS[1 + si]\n"
        "  local id, result, reply, ev = ARGV[base], ARGV[base + 1], ARGV[base + 2], "
        "ARGV[base + 3]",
    )
    return _acks_per_stream(text)


def release_reading() -> str:
    """``release.lua`` that also reads and returns what it read, as it did before the
    read went behind it in the pipeline: ARGV[1] count, [2] group, [3] consumer."""
    text = (LUA / "release.lua").read_text()
    return _swap(
        text,
        "return moved\n",
        "return redis.call('XREADGROUP', 'GROUP', ARGV[2], ARGV[3], 'COUNT', ARGV[1],\n"
        "                  'STREAMS', KEYS[1], '>')\n",
    )


def _entries(flat: list[Any]) -> list[RawEntry]:
    out = []
    for entry_id, fields in flat:
        it = iter(fields)
        out.append(RawEntry(entry_id.decode(), dict(zip(it, it, strict=True))))
    return out


def _streams(reply: Any) -> list[tuple[str, list[RawEntry]]]:
    """A multi-stream XREADGROUP reply, RESP2 or RESP3, as (stream, entries)."""
    if not reply:
        return []
    pairs = reply.items() if isinstance(reply, dict) else reply
    return [(name.decode(), _entries(ents)) for name, ents in pairs]


async def _server_us(client: Any) -> float:
    """The server process's CPU time so far (µs): everything it did, once. The sum of
    ``INFO commandstats`` counts a script's inner commands twice (under their own names
    and inside ``EVALSHA``), so it overstates the script-heavy ways."""
    cpu = await client.info("cpu")
    return float(cpu["used_cpu_user"] + cpu["used_cpu_sys"]) * 1e6


# Part 1: the read alone ------------------------------------------------------------------


async def read_round(client: Any, n: int) -> dict[str, float]:
    task = orjson.dumps(Task(intent="noop", tenant="A").model_dump(mode="json"))
    fields = {"task": task, "attempt": 1, "enq": 1, "reply": ""}
    via_lua = client.register_script(PLAIN_VIA_LUA)
    turn = client.register_script(LUA_TURN)
    names = [f"k:{t}" for t in TENANTS]

    async def fill(streams: list[str]) -> None:
        await client.flushall()
        pipe = client.pipeline(transaction=False)
        for s in streams:
            pipe.xgroup_create(s, GROUP, id="0", mkstream=True)
        for i in range(n):
            pipe.xadd(streams[i % len(streams)], fields)
        for t in TENANTS:
            pipe.zadd("active", {t: 0})
        await pipe.execute()

    async def plain() -> int:
        reply = await client.execute_command(
            "XREADGROUP", "GROUP", GROUP, CONSUMER, "COUNT", BATCH, "STREAMS", "plain", ">"
        )
        return sum(len(e) for _, e in _streams(reply))

    async def plain_via_lua() -> int:
        reply = await via_lua(keys=["plain"], args=[GROUP, CONSUMER, BATCH])
        return sum(len(e) for _, e in _streams(reply))

    async def keys_native() -> int:
        reply = await client.execute_command(
            "XREADGROUP", "GROUP", GROUP, CONSUMER, "COUNT", BATCH // len(names),
            "STREAMS", *names, *([">"] * len(names)),
        )  # fmt: skip
        return sum(len(e) for _, e in _streams(reply))

    async def keys_lua_turn() -> int:
        reply = await turn(keys=["active"], args=[GROUP, CONSUMER, BATCH, "k:"])
        return sum(len(e) for _, e in _streams(reply))

    ways: dict[str, tuple[list[str], Callable[[], Awaitable[int]]]] = {
        "plain": (["plain"], plain),
        "plain_via_lua": (["plain"], plain_via_lua),
        "keys_native": (names, keys_native),
        "keys_lua_turn": (names, keys_lua_turn),
    }
    out = {}
    for name, (streams, read) in ways.items():
        await fill(streams)
        before, got = await _server_us(client), 0
        while (m := await read()) > 0:
            got += m
        assert got == n, (name, got)
        out[name] = (await _server_us(client) - before) / n
    return out


# Part 2: the drain's Redis work -------------------------------------------------------------


class Drain:
    def __init__(self, client: Any, bus: RedisStreamBus, n: int, shas: dict[str, str]) -> None:
        self.client, self.bus, self.n, self.shas = client, bus, n, shas
        # --commands: per way, each round's µs per task by command (INFO commandstats)
        self.commands: dict[str, list[dict[str, float]]] | None = None
        self.keys = ShardKeys("lay", "noop", 0)
        self.tier = StreamRef(self.keys, "p2")

    def ref(self, mode: str, tenant: str) -> StreamRef:
        if mode.startswith(("plain", "release")):
            return self.tier
        return StreamRef(self.keys, f"p2:k:{tenant}")

    async def queue(self, mode: str) -> None:
        await self.client.flushall()
        for t in TENANTS:
            await self.bus.ensure_group(self.ref(mode, t), GROUP)
        tasks = [Task(intent="noop", tenant=t) for t in TENANTS for _ in range(self.n // 10)]
        for i in range(0, len(tasks), 1000):
            part = tasks[i : i + 1000]
            items = [
                Enqueue(self.ref(mode, t.tenant or ""), t.task_id, encode_task(t)) for t in part
            ]
            fair = [Fairness(t.tenant or "") for t in part] if mode.startswith("release") else ()
            await self.bus.enqueue_many(items, max_backlog=10**9, fair=fair)

    async def read(self, mode: str, names: list[str]) -> list[tuple[StreamRef, list[RawEntry]]]:
        if mode.startswith("plain"):
            return [(self.tier, await self.bus.read(self.tier, GROUP, CONSUMER, BATCH, None))]
        if mode == "release":
            return [(self.tier, await self.bus.read_fair(self.tier, GROUP, CONSUMER, BATCH, None))]
        if mode == "release_read_in_lua":
            keys, tier = self.keys, "p2"
            names_ = [self.tier.name, keys.fair(tier), keys.fair_clock(tier), keys.fair_held(tier)]
            reply = await self.bus.lanes.call(
                "EVALSHA", self.shas["release"], len(names_), *names_, BATCH, GROUP, CONSUMER
            )
            return [(self.tier, _entries(reply[0][1]) if reply else [])]
        per = -(-BATCH // len(names))
        reply = await self.bus.lanes.call(
            "XREADGROUP", "GROUP", GROUP, CONSUMER, "COUNT", per,
            "STREAMS", *names, *([">"] * len(names)),
        )  # fmt: skip
        by_name = {StreamRef(self.keys, f"p2:k:{t}").name: t for t in TENANTS}
        return [(self.ref(mode, by_name[s]), e) for s, e in _streams(reply)]

    async def run(self, mode: str) -> tuple[float, float, float]:
        names = [StreamRef(self.keys, f"p2:k:{t}").name for t in TENANTS]
        if self.commands is not None:
            await self.client.config_resetstat()
        server = await _server_us(self.client)
        start, cpu, done = time.perf_counter(), time.process_time(), 0
        while done < self.n:
            got = [(ref, e) for ref, e in await self.read(mode, names) if e]
            if mode.startswith("keys"):  # a key with nothing unread leaves the turn
                full = {ref.name for ref, e in got if len(e) == -(-BATCH // len(names))}
                names = [s for s in names if s in full] or names
            if mode in ("keys_per_lane", "plain_lane_scripts", "keys_per_lane_runs"):
                done += await self.per_lane(got, runs=mode.endswith("runs"))
                continue
            commits = []
            for ref, entries in got:
                ids = [orjson.loads(e.fields[b"task"])["task_id"] for e in entries if e.fields]
                begin = [BeginItem(e.entry_id, i, 1) for e, i in zip(entries, ids, strict=True)]
                await self.bus.begin(ref, GROUP, CONSUMER, begin, fresh=True)
                commits.append((ref, [CommitItem(b.entry_id, b.task_id, RESULT) for b in begin]))
                done += len(begin)
            statuses = await self.bus.commit_streams(GROUP, CONSUMER, commits)
            assert all(s == "ok" for batch in statuses for s in batch)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        server = (await _server_us(self.client) - server) / self.n
        if self.commands is not None:
            stats = await self.client.info("commandstats")
            per_task = {k.removeprefix("cmdstat_"): v["usec"] / self.n for k, v in stats.items()}
            self.commands.setdefault(mode, []).append(per_task)
        return wall, server, cpu * 1e6 / self.n

    async def per_lane(self, got: list[tuple[StreamRef, list[RawEntry]]], runs: bool) -> int:
        at = int(time.time() * 1000)
        streams = [ref.name for ref, _ in got]
        counts = [len(e) for _, e in got] if runs else []
        begin_args: list[Any] = [GROUP, CONSUMER, at, "1", len(streams), *counts]
        commit_args: list[Any] = [GROUP, CONSUMER, at, 86_400, len(streams), *counts]
        hashes, steps = [], []
        for index, (_, entries) in enumerate(got, 1):
            each: tuple[Any, ...] = () if runs else (index,)
            for e in entries:
                task_id = orjson.loads((e.fields or {})[b"task"])["task_id"]
                hashes.append(self.keys.task(task_id))
                steps.append(self.keys.steps(task_id))
                begin_args += (*each, e.entry_id, 1, b"")
                commit_args += (*each, e.entry_id, RESULT, "", "")
        if not hashes:
            return 0
        head = [self.keys.outbox, *streams]
        begin, commit = ("begin_runs", "commit_runs") if runs else ("begin", "commit")
        await self.bus.lanes.call(
            "EVALSHA", self.shas[begin], len(head) + len(hashes), *head, *hashes, *begin_args
        )
        statuses = await self.bus.lanes.call(
            "EVALSHA", self.shas[commit], len(head) + 2 * len(hashes),
            *head, *hashes, *steps, *commit_args,
        )  # fmt: skip
        assert all(s == b"ok" for s in statuses), statuses[:3]
        return len(hashes)


DRAIN_MODES = (
    "plain",
    "plain_lane_scripts",
    "release",
    "release_read_in_lua",
    "keys_per_stream",
    "keys_per_lane",
    "keys_per_lane_runs",
)


async def run(
    url: str, n: int, rounds: int, parts: list[str], ways: tuple[str, ...], commands: bool
) -> None:
    client = connect(url)
    bus = RedisStreamBus(client)
    shas = {
        "begin": await client.script_load(lane_begin()),
        "commit": await client.script_load(lane_commit()),
        "begin_runs": await client.script_load(lane_begin_runs()),
        "commit_runs": await client.script_load(lane_commit_runs()),
        "release": await client.script_load(release_reading()),
    }
    try:
        if "read" in parts:
            reads: dict[str, list[float]] = {}
            for _ in range(rounds):
                for k, v in (await read_round(client, n)).items():
                    reads.setdefault(k, []).append(v)
            medians = {k: round(statistics.median(v), 3) for k, v in reads.items()}
            print(json.dumps({
                "part": "read", "tasks": n, "rounds": rounds,
                "server_us_per_task_median": medians, "loadavg": os.getloadavg(),
            }))  # fmt: skip
        if "drain" in parts:
            drain = Drain(client, bus, n, shas)
            drain.commands = {} if commands else None
            res: dict[str, list[tuple[float, float, float]]] = {m: [] for m in ways}
            for r in range(rounds):
                at = r % len(ways)
                order = ways[at:] + ways[:at]
                for mode in order:
                    await drain.queue(mode)
                    res[mode].append(await drain.run(mode))
            summary: dict[str, Any] = {"part": "drain", "tasks": n, "rounds": rounds}
            for mode, runs in res.items():
                summary[mode] = {
                    "wall_s_median": round(statistics.median(x[0] for x in runs), 3),
                    "server_us_per_task_median": round(statistics.median(x[1] for x in runs), 2),
                    "client_cpu_us_per_task_median": round(
                        statistics.median(x[2] for x in runs), 2
                    ),
                }
                if mode != "plain":
                    pairs = zip(runs, res["plain"], strict=True)
                    ratios = [(m[0] / p[0], m[1] / p[1]) for m, p in pairs]
                    summary[mode]["paired_wall_ratios"] = [round(w, 3) for w, _ in ratios]
                    summary[mode]["paired_server_ratios"] = [round(s, 3) for _, s in ratios]
                    summary[mode]["paired_server_ratio_median"] = round(
                        statistics.median(s for _, s in ratios), 3
                    )
            for mode, rows in (drain.commands or {}).items():
                # A script's inner commands count under their own names and inside
                # EVALSHA (or EXEC): the commands' own time, not a sum to add up.
                names = sorted({name for row in rows for name in row})
                medians = {k: statistics.median(row.get(k, 0.0) for row in rows) for k in names}
                summary[mode]["commands_us_per_task"] = {
                    k: round(v, 2) for k, v in medians.items() if v >= 0.05
                }
            summary["loadavg"] = os.getloadavg()
            print(json.dumps(summary))
    finally:
        await client.flushall()
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--parts", default="read,drain")
    parser.add_argument("--ways", default=",".join(DRAIN_MODES), help="the drain's ways")
    parser.add_argument(
        "--commands", action="store_true", help="the drain's µs per task by command, too"
    )
    args = parser.parse_args()
    with EmbeddedRedis() as server:
        ways = tuple(args.ways.split(","))
        assert ways[0] == "plain" and set(ways) <= set(DRAIN_MODES), ways
        parts = args.parts.split(",")
        asyncio.run(run(server.url, args.tasks, args.rounds, parts, ways, args.commands))


if __name__ == "__main__":
    main()
