"""The bus's own connections (``Lanes``) on Redis Cluster: a node the slot map names but the
client's node table no longer holds (as while redis-py rebuilds its map) refreshes the map,
so the next exchange finds the node instead of failing the same way for ever."""

from __future__ import annotations

import pytest
from redis.asyncio import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from deepagents.transport.redis_streams.lanes import Lanes


async def test_a_node_missing_from_the_table_refreshes_the_map(
    cluster: RedisCluster, prefix: str
) -> None:
    await cluster.initialize()
    key = f"{prefix}:{{lanes}}:k"
    node = cluster.get_node_from_key(key)
    assert node is not None
    removed = cluster.nodes_manager.nodes_cache.pop(node.name)  # the map still names it
    lanes = Lanes(cluster)  # no idle connection yet: the next exchange opens one
    try:
        with pytest.raises(RedisConnectionError, match="is gone"):
            await lanes.pipeline([("SET", key, "1")])
        assert await lanes.pipeline([("SET", key, "1")]) == [b"OK"]
    finally:
        await lanes.aclose()
        await cluster.nodes_manager.initialize()  # whatever happened, the table is whole
        await removed.disconnect()  # its connections: no longer the client's to close
