"""Scoped SIGTERM/SIGINT handling: the first signal stops gracefully, a second one forces."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator

log = logging.getLogger("deepagents.cli")


@contextlib.contextmanager
def on_stop(
    loop: asyncio.AbstractEventLoop, stop: Callable[[], None], force: Callable[[], None]
) -> Iterator[None]:
    received = 0

    def handle(signum: int) -> None:
        nonlocal received
        received += 1
        if received == 1:
            log.info(
                "%s received: finishing in-flight work (again to force)",
                signal.Signals(signum).name,
            )
            stop()
        else:
            log.warning("second signal: stopping now; unfinished tasks will be reclaimed")
            force()

    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, handle, sig)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
