"""Above the transport and the stores, nothing knows how Redis holds the protocol: no
stream-entry field, no XAUTOCLAIM cursor, no cluster flag, no server check's or replica
wait's options (the bus is built with those in ``compose.py``). ``lint-imports`` keeps the
imports apart; this keeps the words out of the code that imports them legitimately."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "deepagents"
BELOW = {"transport", "store"}
FORBIDDEN = {
    "a stream entry's field": re.compile(r"""\bb["'](task|attempt|enq|reply)["']"""),
    "XAUTOCLAIM's cursor": re.compile(r"""["']0-0["']"""),
    "the cluster flag of a bus": re.compile(r"\bbus\.cluster\b"),
    "a server check's option": re.compile(r"check_server\(\s*allow_evicting"),
    "a replica wait's option": re.compile(r"\breplica_wait_ms\s*="),
}


def _code(path: Path) -> list[tuple[int, str]]:
    """The file's lines less their comments (docstrings may name the protocol's words)."""
    return [(n, line.split("#", 1)[0]) for n, line in enumerate(path.read_text().splitlines(), 1)]


def _above() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in BELOW and path.name != "compose.py"
    ]


def test_no_module_above_the_transport_names_how_redis_holds_the_protocol() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {what}"
        for path in _above()
        for n, line in _code(path)
        for what, pattern in FORBIDDEN.items()
        if pattern.search(line)
    ]
    assert found == []


def test_the_patterns_catch_what_they_name() -> None:
    lines = [
        'raw = fields[b"attempt"]',
        'if cursor == "0-0":',
        "if self.bus.cluster:",
        "await bus.check_server(allow_evicting=True)",
        "enqueue_many(items, replica_wait_ms=5)",
    ]
    for line, pattern in zip(lines, FORBIDDEN.values(), strict=True):
        assert pattern.search(line), line
