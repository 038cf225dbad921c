"""No unsafe deserialization or code execution from data anywhere in the runtime."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    [*ROOT.joinpath("deepagents").rglob("*.py"), *ROOT.joinpath("agents").rglob("*.py")]
)
BANNED_MODULES = {"pickle", "cPickle", "dill", "shelve", "marshal", "cloudpickle"}
BANNED_CALLS = {"eval", "exec", "compile"}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pickle_eval_or_unsafe_yaml(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not {a.name.split(".")[0] for a in node.names} & BANNED_MODULES, path
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] not in BANNED_MODULES, path
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                assert func.id not in BANNED_CALLS, f"{path}:{node.lineno} calls {func.id}()"
            if isinstance(func, ast.Attribute) and func.attr in {"load", "load_all"}:
                owner = func.value
                if isinstance(owner, ast.Name) and owner.id == "yaml":
                    loader = {k.arg: k.value for k in node.keywords}.get("Loader")
                    assert loader is not None, f"{path}:{node.lineno}: yaml.load without a Loader"
                    assert "Strict" in ast.unparse(loader) or "Safe" in ast.unparse(loader), path
