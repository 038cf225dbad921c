"""The public surface is deliberate: the exception tree and its codes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator

import deepagents
from deepagents import DeepAgentsError, ErrorCode


def _package_classes() -> Iterator[type]:
    """Every class defined in the package's modules (``__main__`` would run the CLI)."""
    prefix = deepagents.__name__ + "."
    for info in pkgutil.walk_packages(deepagents.__path__, prefix):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                yield cls


def test_every_exception_of_the_package_derives_from_deepagents_error() -> None:
    exceptions = [c for c in _package_classes() if issubclass(c, BaseException)]
    # The walk reached the modules of every layer (these once stood outside the tree).
    found = {c.__qualname__ for c in exceptions}
    assert {"DecodeError", "RuleError", "GatewayError", "ProviderError", "Problem"} <= found
    outside = [c.__qualname__ for c in exceptions if not issubclass(c, DeepAgentsError)]
    assert outside == []


def test_every_exception_code_is_an_error_code() -> None:
    errors = [c for c in _package_classes() if issubclass(c, DeepAgentsError)]
    loose = [(c.__qualname__, c.code) for c in errors if not isinstance(c.code, ErrorCode)]
    assert loose == []
