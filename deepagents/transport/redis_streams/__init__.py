"""Redis Streams implementation of the message bus."""

from deepagents.transport.base import now_ms
from deepagents.transport.redis_streams.bus import RedisStreamBus
from deepagents.transport.redis_streams.pool import check_server, connect

__all__ = ["RedisStreamBus", "check_server", "connect", "now_ms"]
