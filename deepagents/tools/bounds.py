"""JSON from outside the process (a model's arguments, a tool's result, an MCP server's
schema) checked as the gateway checks a body: objects, arrays, strings, finite numbers and
64-bit integers only, bounded depth, string length and size. Iterative: no recursion on
hostile input."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from deepagents.errors import DeepAgentsError, ErrorCode

_INT64 = 1 << 63


@dataclass(frozen=True, slots=True)
class JsonBounds:
    max_depth: int = 32
    max_string_chars: int = 65_536
    max_items: int = 10_000  # keys or elements, all containers together
    max_bytes: int = 1_048_576


DEFAULT_BOUNDS = JsonBounds()


class OutOfBounds(DeepAgentsError, ValueError):
    """The value is not bounded JSON; the message says where and why (the tool layer turns
    it into the error of whoever sent it: arguments, a result, a schema)."""

    code = ErrorCode.VALIDATION_ERROR


def check_json(value: Any, what: str, bounds: JsonBounds = DEFAULT_BOUNDS) -> bytes:
    """Check ``value`` and return it encoded; raise ``OutOfBounds`` naming ``what``."""
    items = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            items += len(item)
            _depth(depth, what, bounds)
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise OutOfBounds(f"{what}: an object key is not a string")
                _string(key, what, bounds)
                stack.append((inner, depth + 1))
        elif isinstance(item, list | tuple):
            items += len(item)
            _depth(depth, what, bounds)
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str):
            _string(item, what, bounds)
        else:
            _scalar(item, what)
        if items > bounds.max_items:
            raise OutOfBounds(f"{what}: more than {bounds.max_items} keys and elements")
    encoded = orjson.dumps(value)
    if len(encoded) > bounds.max_bytes:
        raise OutOfBounds(f"{what}: {len(encoded)} bytes, at most {bounds.max_bytes}")
    return encoded


def _depth(depth: int, what: str, bounds: JsonBounds) -> None:
    if depth > bounds.max_depth:
        raise OutOfBounds(f"{what}: nested deeper than {bounds.max_depth}")


def _string(value: str, what: str, bounds: JsonBounds) -> None:
    if len(value) > bounds.max_string_chars:
        raise OutOfBounds(f"{what}: a string of {len(value)} characters (at most "
                          f"{bounds.max_string_chars})")  # fmt: skip
    if "\x00" in value:
        raise OutOfBounds(f"{what}: a string holds \\u0000")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise OutOfBounds(f"{what}: a string holds a lone surrogate") from None


def _scalar(value: Any, what: str) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise OutOfBounds(f"{what}: an integer outside 64 bits")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise OutOfBounds(f"{what}: a number that is not finite")
        return
    raise OutOfBounds(f"{what}: a {type(value).__name__} is not JSON")
