"""The model-call layer's shared state in Redis: gates, quotas and the fleet's API key."""

from redis.asyncio import Redis

# The client the model-call layer is given and hands on to these stores (it sends no
# command itself): as ``connect`` types it, a ``RedisCluster`` on a cluster.
RedisClient = Redis
