"""Step names for calls made inside a graph's node: scoped by the node's LangGraph task.

LangGraph names each node run by a task id derived from the checkpoint it runs from, so a
node re-run after a crash has the same id and its calls the same step names: their recorded
results come back instead of the calls being made again. Nodes of one super-step run
concurrently; scoping by task keeps their step names apart whatever the interleaving.
"""

from __future__ import annotations

from langgraph.config import get_config

MAX_NAME = 200


def step_name(kind: str) -> str:
    """``<kind>@<checkpoint namespace of the running node>`` (``#`` is the step counter's)."""
    try:
        configurable = get_config().get("configurable", {})
    except RuntimeError:  # called outside a graph's node
        return kind[:MAX_NAME]
    scope = str(configurable.get("checkpoint_ns", ""))
    name = f"{kind}@{scope}" if scope else kind
    return name.replace("#", "_")[:MAX_NAME]
