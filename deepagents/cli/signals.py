"""Scoped signal handling: the first SIGTERM/SIGINT stops gracefully, a second one forces.
SIGHUP, which would end the process at once by default, is logged and ignored: these
processes read their config at start only (the gateway reloads on it, ``gateway/reload.py``)."""

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

    def hang_up() -> None:
        log.warning("SIGHUP received and ignored: this process reads its config at start "
                    "only; restart it to apply a new file")  # fmt: skip

    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, handle, sig)
    loop.add_signal_handler(signal.SIGHUP, hang_up)
    try:
        yield
    finally:
        for sig in (*signals, signal.SIGHUP):
            loop.remove_signal_handler(sig)
