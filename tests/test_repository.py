"""The repository stands on its own: a user's clone has nothing beside it, and its installs
come from uv.lock, which cannot fall behind pyproject.toml unseen."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePath

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECKED = ("tests", "loadtests", "scripts", "deepagents", "agents", ".ci")


def _python_files() -> Iterator[Path]:
    for top in CHECKED:
        yield from sorted((REPO / top).rglob("*.py"))


def _dotdot_literals(trees: dict[Path, ast.Module]) -> list[str]:
    """String literals that climb a directory: ``../x``, ``x/..``, ``..``."""
    return [
        f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}"
        for path, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and os.pardir in PurePath(node.value).parts
    ]


def _static_path(node: ast.expr, file: Path) -> Path | None:
    """The path an expression built from ``__file__`` names: ``Path(__file__)``, then any
    of ``.resolve()``, ``.parent`` and ``.parents[N]``; None for anything else."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Path":
        arg = node.args[0] if len(node.args) == 1 else None
        return file if isinstance(arg, ast.Name) and arg.id == "__file__" else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return _static_path(node.func.value, file) if node.func.attr == "resolve" else None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        base = _static_path(node.value, file)
        return base.parent if base else None
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "parents"
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, int)
    ):
        base = _static_path(node.value.value, file)
        return base.parents[node.slice.value] if base else None
    return None


def _root_names(trees: dict[Path, ast.Module]) -> dict[Path, set[str]]:
    """Per file, the module-level names that hold the repository's root: assigned from
    ``__file__`` (``REPO = Path(__file__).resolve().parents[1]``) or imported from a file
    that assigns one (``from tests.deploy.support import REPO``)."""
    roots = {
        path: {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign) and _static_path(node.value, path) == REPO
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for path, tree in trees.items()
    }
    for path, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                source = REPO.joinpath(*node.module.split(".")).with_suffix(".py")
                roots[path] |= {
                    alias.asname or alias.name
                    for alias in node.names
                    if alias.name in roots.get(source, set())
                }
    return roots


def _roots_climbed(trees: dict[Path, ast.Module]) -> list[str]:
    """``X.parent`` or ``X.parents`` where ``X`` names the repository's root."""
    roots = _root_names(trees)
    return [
        f"{path.relative_to(REPO)}:{node.lineno}: {node.value.id}.{node.attr}"
        for path, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in ("parent", "parents")
        and isinstance(node.value, ast.Name)
        and node.value.id in roots[path]
    ]


def _trees(paths: Iterator[Path]) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in paths}


def test_no_code_or_test_names_a_path_above_the_repository() -> None:
    trees = _trees(_python_files())
    climbs = _dotdot_literals(trees) + _roots_climbed(trees)
    scripts = [p for top in ("scripts", ".ci") for p in sorted((REPO / top).iterdir())]
    climbs += [
        f"{p.relative_to(REPO)}: names a path above it"
        for p in scripts
        if p.is_file() and p.suffix != ".py" and f"{os.pardir}/" in p.read_text(errors="replace")
    ]
    assert climbs == []


def test_the_check_finds_a_climb(tmp_path: Path) -> None:
    """The check above is wired: both forms of a climb are found."""
    sample = REPO / "tests" / f"_climb_{os.getpid()}.py"
    sample.write_text(
        "from pathlib import Path\n"
        "REPO = Path(__file__).resolve().parents[1]\n"
        "SCHEMA = REPO.parent / 'sibling' / 'x.json'\n"
        "OTHER = '../sibling/x.json'\n"
    )
    try:
        trees = _trees(iter([sample]))
        assert len(_dotdot_literals(trees)) == 1
        assert len(_roots_climbed(trees)) == 1
    finally:
        sample.unlink()


# the lock ---------------------------------------------------------------------------------


def _uv_project(tmp_path: Path) -> Path:
    """A copy of what the lock check reads, beside the pinned uv the scripts installed."""
    uv = REPO / ".venv-uv"
    if not (uv / "bin" / "uv").exists():
        if os.environ.get("CI"):
            pytest.fail("no .venv-uv: run the suite through ./scripts/test")
        pytest.skip("no .venv-uv: ./scripts/test installs the pinned uv")
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    # The version is dynamic (deepagents.__version__): uv builds the metadata from the source.
    for package in ("deepagents", "agents"):
        shutil.copytree(
            REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "_uv.sh", tmp_path / "scripts" / "_uv.sh")
    (tmp_path / ".venv-uv").symlink_to(uv)
    return tmp_path


def _check_lock(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", "source scripts/_uv.sh && check_lock scripts/test"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_lock_matches_pyproject(tmp_path: Path) -> None:
    done = _check_lock(_uv_project(tmp_path))
    assert done.returncode == 0, done.stderr


def test_a_range_changed_without_relocking_fails_with_one_line(tmp_path: Path) -> None:
    project = _uv_project(tmp_path)
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    assert '"tenacity>=8.2"' in text, "update this test's edit"
    pyproject.write_text(text.replace('"tenacity>=8.2"', '"tenacity>=8.3"'))
    done = _check_lock(project)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "scripts/test: uv.lock does not match pyproject.toml; run scripts/upgrade-deps "
        "(or 'uv lock' to take in only your change) and commit uv.lock"
    ]


# The worker's composition (the worker, and the kit it hands every delivery step) holds the
# whole bus; every other part of the worker names the narrow protocols it calls.
WHOLE_BUS_HOLDERS = {"worker.py", "delivery_kit.py"}


def _names_the_whole_bus(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.Name) and node.id == "MessageBus" for node in ast.walk(tree))


def test_the_worker_s_collaborators_take_the_narrow_protocols_they_use() -> None:
    worker = REPO / "deepagents" / "worker"
    holders = {path.name for path in worker.glob("*.py") if _names_the_whole_bus(path)}
    assert holders <= WHOLE_BUS_HOLDERS, sorted(holders - WHOLE_BUS_HOLDERS)
    assert _names_the_whole_bus(worker / "worker.py")  # the check finds a use
