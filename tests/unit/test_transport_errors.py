"""Which Redis failures a worker waits out and which it stops on (``translate``)."""

from __future__ import annotations

import pytest
import redis.exceptions as rex

from deepagents.errors import GroupVanished, TransportError
from deepagents.transport.redis_streams.errors import redis_errors, translate

PASSING = [
    rex.ConnectionError("Connection refused"),
    rex.TimeoutError("Timeout reading from socket"),
    rex.BusyLoadingError("Redis is loading the dataset in memory"),
    rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
    rex.ResponseError("MISCONF Errors writing to the AOF file: No space left on device"),
    rex.ReadOnlyError("You can't write against a read only replica."),
    rex.ResponseError("NOREPLICAS Not enough good replicas to write."),
    rex.ResponseError("BUSY Redis is busy running a script. You can only call SCRIPT KILL"),
    rex.MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
    rex.ClusterDownError("The cluster is down"),
    rex.TryAgainError("Multiple keys request during rehashing of slot"),
    rex.ResponseError("UNBLOCKED the stream key no longer exists"),
]
FINAL = [
    rex.ResponseError("ERR wrong number of arguments for 'xadd' command"),
    rex.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    rex.ResponseError("BUSYGROUP Consumer Group name already exists"),
    rex.NoPermissionError("this user has no permissions to run the 'xadd' command"),
]


@pytest.mark.parametrize("exc", PASSING, ids=lambda e: str(e)[:24])
def test_failures_that_pass_are_retried(exc: rex.RedisError) -> None:
    assert translate(exc, "commit").retryable


@pytest.mark.parametrize("exc", FINAL, ids=lambda e: str(e)[:24])
def test_mistakes_are_not_retried(exc: rex.RedisError) -> None:
    assert not translate(exc, "commit").retryable


def test_messages_name_the_cause() -> None:
    full = translate(rex.ResponseError("MISCONF Errors writing to the AOF file: x"), "enqueue")
    assert str(full).startswith("enqueue: Redis refuses writes: it cannot write its persistence")
    oom = translate(rex.OutOfMemoryError("command not allowed"), "commit")
    assert "out of memory" in str(oom) and "nothing was written" in str(oom)
    gone = translate(rex.ResponseError("NOGROUP No such key 'a' or consumer group 'b'"), "read")
    assert isinstance(gone, GroupVanished)


def test_a_pipelined_command_s_error_is_read_through_redis_py_s_wrapping() -> None:
    exc = rex.ResponseError(
        "Command # 1 (SET da:loc:t1 echo|0|p2 EX 691200) of pipeline caused error: "
        "('MISCONF Errors writing to the AOF file: No space left on device',)"
    )
    err = translate(exc, "record task locations")
    assert err.retryable
    assert str(err).endswith("(MISCONF Errors writing to the AOF file: No space left on device)")
    gone = rex.ResponseError(
        "Command # 2 (XREADGROUP GROUP echo c1 COUNT 1 STREAMS s >) of pipeline caused "
        "error: NOGROUP No such key 's' or consumer group 'echo'"
    )
    assert isinstance(translate(gone, "read"), GroupVanished)


def test_a_cluster_no_node_answers_is_a_transport_error() -> None:
    unreachable = pytest.raises(TransportError, match="enqueue: Redis Cluster unreachable")
    with unreachable as caught, redis_errors("enqueue"):
        raise rex.RedisClusterException("Redis Cluster cannot be connected.")
    assert caught.value.retryable
