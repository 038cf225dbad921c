"""MemoryAnswers: ``AnswerCache`` in one process, over a MemoryBus's state."""

from __future__ import annotations

from deepagents.store.answers import MAX_ANSWER_BYTES
from deepagents.transport.keys import Keys
from deepagents.transport.memory import State


class MemoryAnswers:
    def __init__(self, state: State, keys: Keys) -> None:
        self.state = state
        self.keys = keys

    async def get(self, agent: str, cache_key: str) -> bytes | None:
        raw = self.state.string(self.keys.answer(agent, cache_key))
        return None if raw is None else raw.encode()

    async def put(self, agent: str, cache_key: str, output_json: bytes, ttl_s: int) -> bool:
        if len(output_json) > MAX_ANSWER_BYTES:
            return False
        key = self.keys.answer(agent, cache_key)
        self.state.strings[key] = output_json.decode()
        self.state.expire(key, ttl_s)
        return True
