"""The Lua scripts and the Python code name a task's states from one list, ``TaskState``:
every state a script writes or compares is one of its values, and each value is written
by some script (so the enum holds no state nothing reaches)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from deepagents.gateway.schemas import TaskView
from deepagents.transport.states import TaskState

LUA = Path(__file__).parents[2] / "deepagents" / "transport" / "redis_streams" / "lua"
_WRITTEN = re.compile(r"'HSET',\s*[^,]+,\s*'state',\s*'(\w+)'")
# Where a script reads the state: HGET ... 'state' into ``state``, or HMGET ... 'state', ...
# (its first field) into ``h``, then compares it.
_COMPARED = re.compile(r"(?:\bstate|\bh\[1\])\s*[=~]=\s*'(\w+)'")
_READS_STATE_INTO_H = re.compile(r"local h = redis\.call\('HMGET', KEYS\[\w+\], 'state'")


def _scripts() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(LUA.glob("*.lua"))}


def _states(pattern: re.Pattern[str], text: str) -> set[str]:
    return set(pattern.findall(text))


def test_every_state_a_script_writes_or_compares_is_a_task_state() -> None:
    written: set[str] = set()
    for name, text in _scripts().items():
        compared = _states(_COMPARED, text) if _READS_STATE_INTO_H.search(text) else set()
        compared |= set(re.findall(r"\bstate\s*[=~]=\s*'(\w+)'", text))
        found = _states(_WRITTEN, text) | compared
        assert found <= set(TaskState), f"{name}: {sorted(found - set(TaskState))}"
        written |= _states(_WRITTEN, text)
    assert written == set(TaskState), sorted(set(TaskState) ^ written)


def test_the_pattern_finds_a_misspelt_state() -> None:
    assert _states(_WRITTEN, "redis.call('HSET', KEYS[1], 'state', 'queud')") == {"queud"}
    assert _states(_COMPARED, "if h[1] ~= 'waitin' then") == {"waitin"}


def test_the_http_api_shows_the_same_states() -> None:
    shown = typing.get_args(TaskView.model_fields["state"].annotation)
    assert set(shown) - {"unknown"} == set(TaskState)
