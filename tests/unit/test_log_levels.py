"""``-v`` raises deepagents' loggers to DEBUG, not other libraries': their DEBUG lines quote
what they carry (redis-py's parser writes whole push replies, results included), unless
they are named (issue 16, finding 7)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from deepagents.telemetry.logs import configure_logging

REDIS_PARSER = "redis._parsers.hiredis"  # where redis-py logs "Push response: ..."


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    names = ("deepagents", "redis", REDIS_PARSER)
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, saved in levels.items():
        logging.getLogger(name).setLevel(saved)


def _written(debug_loggers: tuple[str, ...] = ()) -> str:
    out = io.StringIO()
    configure_logging("DEBUG", "json", out, debug_loggers=debug_loggers)
    logging.getLogger("deepagents.worker").debug("ours at debug")
    logging.getLogger(REDIS_PARSER).debug("Push response: [b'message', b'{\"output\": 1}']")
    logging.getLogger(REDIS_PARSER).info("theirs at info")
    return out.getvalue()


def test_verbose_keeps_other_libraries_at_info() -> None:
    written = _written()
    assert "ours at debug" in written and "theirs at info" in written
    assert "Push response" not in written


def test_a_library_named_is_written_at_debug() -> None:
    assert "Push response" in _written(("redis",))
