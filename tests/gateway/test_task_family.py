"""``GET /v1/tasks/{id}``'s view of a delegating task: its parent and its children, read from
the task hash the orchestrator's ``lookup`` returns (``Orchestrator.lookup``)."""

from __future__ import annotations

from deepagents.gateway.routes_tasks import _view


def test_a_child_names_its_parent_and_a_parent_lists_its_children() -> None:
    parent = _view("p", {"agent": "parent", "state": "waiting", "children": "a b c"})
    assert (parent.parent_id, parent.children, parent.state) == (None, ["a", "b", "c"], "waiting")
    child = _view("a", {"agent": "helper", "state": "running", "parent_id": "p", "depth": "1"})
    assert (child.parent_id, child.children) == ("p", [])
    plain = _view("x", {"agent": "echo", "state": "queued"})
    assert (plain.parent_id, plain.children) == (None, [])
