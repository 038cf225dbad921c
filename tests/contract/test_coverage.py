"""Every method of every protocol of the bus is called by some contract case, and so on
every backend (each case runs on each one): a method added to a protocol without a case
that holds the backends to the same outcome fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from deepagents.transport.base import PROTOCOLS, MessageBus

HERE = Path(__file__).parent


def _methods() -> dict[str, str]:
    found = {name: "MessageBus" for name in vars(MessageBus) if not name.startswith("_")}
    for protocol in PROTOCOLS:
        found.update((name, protocol.__name__) for name in vars(protocol) if name[0] != "_")
    return found


def _called_on_a_bus(source: str) -> set[str]:
    """Attributes taken of a bus: ``backend.bus.x``, ``b.bus.x``, or ``bus.x`` / ``memory.x``
    (the fixture's own calls)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if (isinstance(owner, ast.Attribute) and owner.attr == "bus") or (
            isinstance(owner, ast.Name) and owner.id in ("bus", "memory")
        ):
            names.add(node.attr)
    return names


def test_every_method_of_every_protocol_has_a_contract_case() -> None:
    called = set().union(
        *(
            _called_on_a_bus(path.read_text())
            for path in HERE.glob("*.py")
            if path != Path(__file__)
        )
    )
    missing = {name: protocol for name, protocol in _methods().items() if name not in called}
    assert missing == {}


def test_the_check_finds_a_call_and_misses_a_method_never_called() -> None:
    assert _called_on_a_bus("await backend.bus.replay(keys)\nx = b.bus.park") == {"replay", "park"}
    assert "touch" not in _called_on_a_bus("await backend.touch()")
