"""The fleet's copy of one model's API key: a versioned hash and the refresh lock.

The publish is a compare-and-set on the version that also checks the lock is still the
caller's, so a holder paused past its lease cannot overwrite a newer key (fencing). How a
401 turns into a refresh is the model-call layer's (``modelcall/credentials.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from deepagents.store.models import RedisClient
from deepagents.store.models.keys import ModelKeys


@dataclass(frozen=True, slots=True)
class Credential:
    secret: str
    version: int


# KEYS: credential hash, lock. ARGV: expected version, new secret, lock token, ttl_ms.
# Publishes only if the version did not move and, when a token is given, the lock is ours.
_PUBLISH = """
if ARGV[3] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[3] then return 0 end
local current = tonumber(redis.call('HGET', KEYS[1], 'ver') or '0')
if current ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'ver', current + 1, 'secret', ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
return current + 1
"""

# Compare-and-delete: release the lock only if we still hold it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class SharedCredential:
    def __init__(
        self, redis: RedisClient, keys: ModelKeys, *, lock_ttl_ms: int, cache_ttl_ms: int
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._lock_ttl_ms = lock_ttl_ms
        self._cache_ttl_ms = cache_ttl_ms
        self._publish = redis.register_script(_PUBLISH)
        self._release = redis.register_script(_RELEASE)

    async def read(self) -> Credential | None:
        version, secret = await self._redis.hmget(self._keys.credential, ["ver", "secret"])
        if version is None or not secret:
            return None
        text = secret.decode() if isinstance(secret, bytes) else str(secret)
        return Credential(text, int(version))

    async def publish(self, expected: int, secret: str, token: str = "") -> int:
        """The new version, or 0: the version moved, or (with a token) the lock is not ours."""
        published = await self._publish(
            keys=[self._keys.credential, self._keys.credential_lock],
            args=[expected, secret, token, self._cache_ttl_ms],
        )
        return int(published or 0)

    async def lock(self, token: str) -> bool:
        """Take the refresh lock for ``lock_ttl_ms``; False when another holds it."""
        taken = await self._redis.set(
            self._keys.credential_lock, token, nx=True, px=self._lock_ttl_ms
        )
        return bool(taken)

    async def unlock(self, token: str) -> None:
        await self._release(keys=[self._keys.credential_lock], args=[token])
