"""The Redis a benchmark measures: the one at ``--redis-url``, or a fresh embedded one."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.cli.common import run


def run_on(url: str | None, measure: Callable[[str], Coroutine[Any, Any, None]]) -> None:
    """Run ``measure(url)`` to completion against ``url``, or against an embedded Redis
    started for it and stopped after."""
    if url:
        run(measure(url))
        return
    with EmbeddedRedis() as server:
        run(measure(server.url))
