"""RedisStreamBus and MemoryBus implement the whole MessageBus protocol the layers above
are typed against: the composition of the narrow protocols (``PROTOCOLS``), each method
in exactly one of them.

Checked twice: by mypy (``_typed`` below does not type-check if a bus lacks a member or
takes other parameters) and here at run time, member by member, so a backend written later
can be held to the same list."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.transport.base import PROTOCOLS, MessageBus
from deepagents.transport.memory import MemoryBus
from deepagents.transport.redis_streams.bus import RedisStreamBus

BUSES = [RedisStreamBus, MemoryBus]


def _typed(client: Redis) -> MessageBus:
    return RedisStreamBus(client)


def _typed_memory() -> MessageBus:
    return MemoryBus()


def _own(protocol: type[Any]) -> set[str]:
    own = (
        set(vars(protocol))
        - set(vars(object))
        - {"__protocol_attrs__", "__non_callable_proto_members__"}
    )
    return {n for n in own if not n.startswith("_") or n in ("__aenter__", "__aexit__")}


def _members(protocol: type[Any]) -> list[str]:
    """Its own members and those of the protocols it composes."""
    parts = [p for p in protocol.__mro__ if getattr(p, "_is_protocol", False)]
    return sorted(set().union(*(_own(p) for p in parts if p is not typing.Protocol)))


def _parameters(function: Any) -> list[tuple[str, Any, bool]]:
    signature = inspect.signature(function)
    return [
        (p.name, p.kind, p.default is not inspect.Parameter.empty)
        for p in signature.parameters.values()
    ]


def test_the_protocol_lists_what_callers_use() -> None:
    # The operations the orchestrator, admin views, fleet sampler and gateway call.
    wanted = {
        "aclose",
        "cancel",
        "check_server",
        "enqueue_many",
        "outbox_lengths",
        "oldest_idle_ms",
        "ping_ms",
        "reply_listener",
        "set_many",
        "shard_backlog",
        "stream_stats",
    }
    assert wanted <= set(_members(MessageBus))


def test_each_method_belongs_to_one_protocol_and_none_names_the_server_s_kind() -> None:
    seen: dict[str, str] = {}
    for protocol in PROTOCOLS:
        for name in _own(protocol):
            assert name not in seen, f"{name} in {seen.get(name)} and {protocol.__name__}"
            seen[name] = protocol.__name__
    assert set(seen) | {"aclose"} == set(_members(MessageBus))
    # Which server runs the bus (a cluster or not) is the transport's own business.
    assert "cluster" not in seen


@pytest.mark.parametrize("bus", BUSES, ids=lambda bus: bus.__name__)
@pytest.mark.parametrize("name", _members(MessageBus))
def test_each_bus_has_each_member_with_the_same_parameters(bus: type[Any], name: str) -> None:
    declared = inspect.getattr_static(MessageBus, name)
    implemented = inspect.getattr_static(bus, name, None)
    assert implemented is not None, f"{bus.__name__} lacks {name}"
    if isinstance(declared, property):
        assert isinstance(implemented, property), f"{name} must be a property"
        return
    assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), (
        f"{name}: async in one, not in the other"
    )
    assert _parameters(implemented) == _parameters(declared), name
