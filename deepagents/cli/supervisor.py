"""A supervisor of forked worker processes (``deepagents worker --processes N``).

The supervisor imports and loads everything once, then forks N children, each a whole worker
with its own event loop, Redis connections and consumer name. A child that dies is replaced
by forking again: the new child starts from the supervisor's memory, with nothing left to
import, so it is reading its streams within milliseconds. The first SIGTERM or SIGINT asks
every child to stop gracefully (each hands back what it has not started); a second one kills
them. A child that fails at once is replaced after a growing delay, and one that exits with
a configuration error (exit 2) stops the whole set: forking it again would fail the same way.

The supervisor runs no event loop and no thread, so forking it is safe. It waits on a
self-pipe that the signal handlers write to (``signal.set_wakeup_fd``): SIGCHLD, SIGTERM and
SIGINT each wake it at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("deepagents.cli")

EXIT_USAGE = 2  # a configuration error: the same child would fail again
QUICK_EXIT_S = 10.0  # a child that ran less than this before it exited failed "at once"
FIRST_DELAY_S = 0.1  # the delay before replacing a child that failed at once, doubled ...
MAX_DELAY_S = 10.0  # ... up to this
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True, slots=True)
class Fork:
    """What a child knows of its own start: its slot (0..N-1), the supervisor's pid and the
    monotonic time just before the fork (CLOCK_MONOTONIC is one clock for every process)."""

    slot: int
    supervisor: int
    forked_at: float

    def since_fork_ms(self) -> float:
        return (time.monotonic() - self.forked_at) * 1000


@dataclass(slots=True)
class _Slot:
    pid: int = 0
    forked_at: float = 0.0
    quick_exits: int = 0  # consecutive children that failed at once
    due: float = 0.0  # when to fork its next child (monotonic), once it has none


class Supervisor:
    """Keeps ``processes`` children running ``child(fork)``, whose return value is the
    child's exit code."""

    def __init__(self, processes: int, child: Callable[[Fork], int]) -> None:
        self.child = child
        self.slots = [_Slot() for _ in range(processes)]
        self.signals = 0  # SIGTERM/SIGINT received
        self.exit_code = 0
        self._pipe: tuple[int, ...] = ()

    def run(self) -> int:
        wake_r, wake_w = self._pipe = os.pipe()
        for fd in (wake_r, wake_w):
            os.set_blocking(fd, False)
        previous = self._install(wake_w)
        try:
            for slot in range(len(self.slots)):
                self._fork(slot, replacing=False)
            while True:
                self._reap()
                if not self._running():
                    break
                self._fork_due()
                select.select([wake_r], [], [], self._timeout())
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
        finally:
            self._restore(previous)
            os.close(wake_r)
            os.close(wake_w)
        log.info("worker supervisor stopped", extra={"action": "supervisor_stopped"})
        return self.exit_code

    # signals ------------------------------------------------------------------------------

    def _install(self, wake_w: int) -> dict[int, object]:
        previous: dict[int, object] = {signal.SIGCHLD: signal.signal(signal.SIGCHLD, _wake)}
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, self._on_stop_signal)
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.set_wakeup_fd(wake_w)
        return previous

    def _restore(self, previous: dict[int, object]) -> None:
        signal.set_wakeup_fd(-1)
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _on_stop_signal(self, signum: int, _frame: object) -> None:
        self.signals += 1
        if self.signals == 1:
            log.info(
                "%s received: stopping the worker processes (again to force)",
                signal.Signals(signum).name,
                extra={"action": "supervisor_stopping"},
            )
            self._send(signal.SIGTERM)
        else:
            log.warning(
                "second signal: killing the worker processes; their tasks are reclaimed",
                extra={"action": "supervisor_killing"},
            )
            self._send(signal.SIGKILL)

    def _send(self, sig: signal.Signals) -> None:
        for slot in self.slots:
            if slot.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, sig)

    # children -----------------------------------------------------------------------------

    def _running(self) -> bool:
        if self.signals or self.exit_code == EXIT_USAGE:
            return any(slot.pid for slot in self.slots)
        return True

    def _fork(self, index: int, *, replacing: bool) -> None:
        slot = self.slots[index]
        # A stop signal handled between the fork and the slot's new pid would miss the child.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        fork = Fork(index, os.getpid(), time.monotonic())
        pid = os.fork()
        if pid == 0:  # the child: never returns into the supervisor's loop
            for fd in self._pipe:
                os.close(fd)
            os._exit(_child(self.child, fork, held))
        slot.pid, slot.forked_at = pid, fork.forked_at
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        log.info(
            "worker process forked",
            extra={"action": "child_forked", "slot": index, "pid": pid, "replacing": replacing},
        )

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            index = next((i for i, s in enumerate(self.slots) if s.pid == pid), None)
            if index is not None:
                self._exited(index, os.waitstatus_to_exitcode(status))

    def _exited(self, index: int, code: int) -> None:
        slot = self.slots[index]
        lived = time.monotonic() - slot.forked_at
        slot.pid = 0
        extra = {"action": "child_exited", "slot": index, "exit_code": code}
        if self.signals or self.exit_code == EXIT_USAGE:  # stopping: a failure is the result
            self.exit_code = self.exit_code or (1 if code else 0)
            log.info("worker process exited", extra=extra)
            return
        if code == EXIT_USAGE:
            self.exit_code = EXIT_USAGE
            log.error("worker process failed on its configuration: stopping", extra=extra)
            self._send(signal.SIGTERM)
            return
        slot.quick_exits = slot.quick_exits + 1 if lived < QUICK_EXIT_S else 0
        delay = 0.0 if not slot.quick_exits else _delay(slot.quick_exits)
        slot.due = time.monotonic() + delay
        log.warning(
            "worker process exited: replacing it",
            extra={**extra, "lived_s": round(lived, 3), "delay_s": delay},
        )

    def _fork_due(self) -> None:
        if self.signals or self.exit_code == EXIT_USAGE:
            return
        now = time.monotonic()
        for index, slot in enumerate(self.slots):
            if not slot.pid and slot.due <= now:
                self._fork(index, replacing=True)

    def _timeout(self) -> float | None:
        """Until the next delayed fork; ``None`` (wait for a signal) when none is due."""
        waiting = [s.due for s in self.slots if not s.pid]
        if not waiting or self.signals:
            return None
        return max(0.0, min(waiting) - time.monotonic())


def _delay(quick_exits: int) -> float:
    return float(min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (quick_exits - 1)))


def _wake(_signum: int, _frame: object) -> None:
    """SIGCHLD's handler: the wake-up fd does the work; a handler must exist for it."""


def _child(child: Callable[[Fork], int], fork: Fork, mask: set[int | signal.Signals]) -> int:
    """Run in the forked child: the supervisor's signal set-up undone, then ``child``."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    # Its own process group: a Ctrl-C at the terminal reaches the supervisor only, which
    # then stops the children once (a child that got it too would take the supervisor's
    # SIGTERM as a second signal and stop hard).
    os.setpgid(0, 0)
    code = 1
    try:
        code = child(fork)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        log.exception("worker process failed")
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    return code
