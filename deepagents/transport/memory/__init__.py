"""The message bus in one process (``MemoryBus``): the Redis bus's semantics without a
server, for unit tests and ``deepagents.testing``."""

from deepagents.transport.memory.bus import MemoryBus
from deepagents.transport.memory.data import State

__all__ = ["MemoryBus", "State"]
