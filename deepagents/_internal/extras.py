"""The optional extras of the distribution, checked before a command that needs one starts.

A missing package then fails as one line naming the extra to install, not as a traceback
from deep inside an import.
"""

from __future__ import annotations

import importlib.util

from deepagents.errors import MissingExtra

# The top-level modules each extra brings (pyproject.toml, [project.optional-dependencies]).
EXTRAS: dict[str, tuple[str, ...]] = {
    "gateway": ("fastapi", "uvicorn"),
    "audit": ("asyncpg",),
    "grpc": ("grpc", "google.protobuf"),
    "mcp": ("mcp",),
    "langgraph": ("langgraph", "langchain_core", "langchain"),
    "otlp": ("opentelemetry.exporter.otlp.proto.http",),
    "cron": ("croniter",),
    "a2a": ("a2a",),
}


def require_extra(extra: str, what: str) -> None:
    """Raise ``MissingExtra`` naming ``extra`` when one of its modules cannot be imported."""
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:  # a dotted name whose parent is missing
            found = None
        if found is None:
            raise MissingExtra(what, extra, module)
