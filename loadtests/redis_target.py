"""The Redis a benchmark measures: the one at ``--redis-url``, or a fresh embedded one."""

from __future__ import annotations

import argparse
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


def bench_main(
    doc: str | None,
    count: str,
    default: int,
    measure: Callable[[str, int], Coroutine[Any, Any, None]],
) -> None:
    """The command line of a benchmark that measures one Redis: ``--redis-url`` and
    ``--<count>`` (how many operations), then ``measure(url, count)`` via ``run_on``."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis-url")
    parser.add_argument(f"--{count}", type=int, default=default)
    args = parser.parse_args()
    n = getattr(args, count)
    run_on(args.redis_url, lambda url: measure(url, n))
