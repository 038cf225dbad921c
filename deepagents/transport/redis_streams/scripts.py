"""The Lua scripts of the delivery protocol, loaded once per client.

Every script touches the keys of one shard only (one hash tag) and receives every key
in KEYS, so each runs in one hash slot on Redis Cluster.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

_NAMES = (
    "enqueue",
    "begin",
    "commit",
    "reschedule",
    "promote",
    "dead_letter",
    "touch",
    "hand_back",
    "prune_consumers",
    "expose",
    "replay",
    "cancel",
    "move",
    "park",
    "answer",
    "wake",
    "record_steps",
    "tenant_waiting",
    "park_children",
    "child_ended",
    "link_child",
    "release",
    "release_capped",
    "end_damaged",
)


# A line "-- include <name>" stands for lua/<name>.lua: Redis runs each script alone, so a
# function two scripts share is written once and copied into both when they are read.
_INCLUDE = re.compile(r"^-- include (\w+)$", re.MULTILINE)


@functools.cache  # read once per process; a forked worker inherits them (compose.preload)
def _source(name: str) -> str:
    text = _read(name)
    return _INCLUDE.sub(lambda line: _read(line.group(1)), text)


def _read(name: str) -> str:
    return (
        resources.files("deepagents.transport.redis_streams")
        .joinpath(f"lua/{name}.lua")
        .read_text(encoding="utf-8")
    )


@dataclass(frozen=True, slots=True)
class Scripts:
    enqueue: AsyncScript
    begin: AsyncScript
    commit: AsyncScript
    reschedule: AsyncScript
    promote: AsyncScript
    dead_letter: AsyncScript
    touch: AsyncScript
    hand_back: AsyncScript
    prune_consumers: AsyncScript
    expose: AsyncScript
    replay: AsyncScript
    cancel: AsyncScript
    move: AsyncScript
    park: AsyncScript
    answer: AsyncScript
    wake: AsyncScript
    record_steps: AsyncScript
    tenant_waiting: AsyncScript
    park_children: AsyncScript
    child_ended: AsyncScript
    link_child: AsyncScript
    release: AsyncScript
    release_capped: AsyncScript
    end_damaged: AsyncScript

    @staticmethod
    def preload() -> None:
        """Read every script's source now (they are read once per process)."""
        for name in _NAMES:
            _source(name)

    @classmethod
    def register(cls, client: Redis) -> Scripts:
        return cls(**{name: client.register_script(_source(name)) for name in _NAMES})
