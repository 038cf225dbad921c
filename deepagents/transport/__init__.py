"""Transport layer: the message-bus interface and its Redis Streams implementation."""

from deepagents.transport.base import MessageBus, StreamRef
from deepagents.transport.keys import Keys, ShardKeys, shard_of

__all__ = ["Keys", "MessageBus", "ShardKeys", "StreamRef", "shard_of"]
