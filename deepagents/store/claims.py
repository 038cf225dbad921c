"""Where step records too large for Redis go: a claim check (docs/design.md, "Durable
steps"). Redis keeps ``@<ref>`` in the task's steps hash, the body lives here.

A body is written before its reference is recorded (owner-checked, in Redis); a stale
worker's refused record leaves only an orphan body, which expires like the rest.
"""

from __future__ import annotations

import time
from typing import Protocol

from deepagents._internal.ids import uuid7_str


class ClaimStore(Protocol):
    async def put(self, task_id: str, body: bytes, ttl_s: int) -> str:
        """Store ``body``; return the reference to record in Redis."""
        ...

    async def get(self, ref: str) -> bytes | None:
        """The body, or None when it is gone (expired, or its database was reset)."""
        ...

    async def aclose(self) -> None: ...


class MemoryClaims:
    """In this process: ``deepagents.testing`` and unit tests."""

    def __init__(self) -> None:
        self.bodies: dict[str, tuple[bytes, float]] = {}

    async def put(self, task_id: str, body: bytes, ttl_s: int) -> str:
        ref = f"mem:{uuid7_str()}"
        self.bodies[ref] = (body, time.monotonic() + ttl_s)
        return ref

    async def get(self, ref: str) -> bytes | None:
        found = self.bodies.get(ref)
        if found is None or found[1] <= time.monotonic():
            return None
        return found[0]

    async def aclose(self) -> None:
        return None
