"""``deepagents audit show``'s detail column for delegation's events (rows as the audit
store returns them: unmapped event fields in ``detail``)."""

from __future__ import annotations

from deepagents.cli.audit import delegation_detail


def test_a_parent_s_park_a_child_s_end_and_a_child_s_submit_are_described() -> None:
    park = {"type": "waiting_children", "detail": {"children": ["a", "b"], "mode": "all"}}
    assert delegation_detail(park) == "waits for all of 2: a b"
    ended = {"type": "child_ended", "detail": {"child_id": "a", "status": "failed"}}
    assert delegation_detail(ended) == "child a ended failed"
    submitted = {"type": "submitted", "detail": {"parent_id": "p"}}
    assert delegation_detail(submitted) == "child of p"
    assert delegation_detail({"type": "submitted", "detail": None}) == ""
