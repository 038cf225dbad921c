"""The Lua scripts as Redis receives them: each shared function copied in where a script
names it, once, and no include line left for Redis to ignore (a script that silently lost
its function would fail only when that branch ran)."""

from __future__ import annotations

import re

import pytest

from deepagents.transport.redis_streams.scripts import _NAMES, _read, _source


@pytest.mark.parametrize("name", _NAMES)
def test_every_include_is_expanded(name: str) -> None:
    raw, sent = _read(name), _source(name)
    assert not re.search(r"^-- include", sent, re.MULTILINE)
    for included in re.findall(r"^-- include (\w+)$", raw, re.MULTILINE):
        assert sent.count(_read(included)) == 1


def test_the_id_comparison_is_written_once_and_sent_where_it_is_used() -> None:
    for name in _NAMES:
        assert "function id_less" not in _read(name)
        uses = "id_less(" in _source(name)
        assert uses == (name in {"enqueue", "release_capped"}), name
        if uses:
            assert _source(name).count("local function id_less") == 1
