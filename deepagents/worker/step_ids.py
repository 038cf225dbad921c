"""Step ids that come out the same on every delivery of a task, however its branches interleave.

A step's id is its name, with ``#<n>`` from its second use on in the same branch (a loop), and
inside a branch of ``gather`` the branch's path before it: ``g<k>.<i>#`` for the ``i``-th branch of
the branch's ``k``-th gather. Counters are per branch, so concurrency never changes an id; only
the code's own order of steps within one branch does, which is the one determinism rule.
"""

from __future__ import annotations

from contextvars import ContextVar

from deepagents.errors import StepError

MAX_NAME = 200


class Branch:
    __slots__ = ("_gathers", "_seen", "path")

    def __init__(self, path: str = "") -> None:
        self.path = path
        self._seen: dict[str, int] = {}
        self._gathers = 0

    def next_id(self, name: str) -> str:
        n = self._seen.get(name, 0) + 1
        self._seen[name] = n
        return f"{self.path}{name}" if n == 1 else f"{self.path}{name}#{n}"

    def fork(self, branches: int) -> list[Branch]:
        """The branches of this branch's next ``gather``."""
        k = self._gathers
        self._gathers += 1
        return [Branch(f"{self.path}g{k}.{i}#") for i in range(branches)]


current_branch: ContextVar[Branch | None] = ContextVar("deepagents_branch", default=None)


def check_name(name: object) -> str:
    """A step name: text of 1 to 200 characters without ``#`` (it separates counters)."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or "#" in name:
        raise StepError(f"a step name is 1 to {MAX_NAME} characters without '#': {name!r}")
    return name
