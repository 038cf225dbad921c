"""What a step record's field holds: the result's JSON itself, or ``@<ref>`` (a claim check)
when it is over the agent's ``step_inline_bytes``. JSON never starts with ``@``."""

from __future__ import annotations

from typing import Any

import orjson

from deepagents.errors import StepError, StepTooLarge
from deepagents.store.claims import ClaimStore

CLAIM = b"@"


def encode_json(what: str, value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise StepError(
            f"{what} must be JSON (a dict, list, str, number, bool or None): {exc}"
        ) from exc


class RecordCodec:
    def __init__(self, claims: ClaimStore | None, inline_bytes: int, ttl_s: int) -> None:
        self.claims, self.inline_bytes, self.ttl_s = claims, inline_bytes, ttl_s

    async def field_value(self, what: str, task_id: str, body: bytes) -> bytes:
        """The field to record: ``body`` itself, or a claim check on a body stored apart."""
        if len(body) <= self.inline_bytes:
            return body
        if self.claims is None:
            raise StepTooLarge(
                f"{what} is {len(body)} bytes, over step_inline_bytes ({self.inline_bytes}), "
                "and no database holds larger ones: set DEEPAGENTS_DATABASE_URL (and run "
                "`deepagents db migrate`), raise step_inline_bytes, or return less"
            )
        # The body outlives the task by its result TTL at most: the records expire then.
        return CLAIM + (await self.claims.put(task_id, body, self.ttl_s)).encode()

    async def body(self, what: str, value: bytes) -> bytes:
        if not value.startswith(CLAIM):
            return value
        ref = value[1:].decode()
        if self.claims is None:
            raise StepError(f"{what} is stored in the database ({ref}), and none is configured")
        found = await self.claims.get(ref)
        if found is None:
            raise StepError(f"{what}'s body ({ref}) is gone from the database")
        return found
