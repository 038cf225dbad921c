"""docs/reference/ stays in step with the code: every command, option, config key, metric
and exported name is on its page, and each page is what scripts/gen-reference writes now."""

from __future__ import annotations

import importlib
import re

import pytest
from pydantic import BaseModel

from tests.support import reference_pages as pages

FIX = "run ./scripts/gen-reference and commit docs/reference/"


def page(name: str) -> str:
    return (pages.REFERENCE / name).read_text()


def section(text: str, heading: str) -> str:
    """The text under the first heading that contains ``heading``, to the next heading of
    the same or a higher level."""
    match = re.search(rf"^(#+) [^\n]*{re.escape(heading)}[^\n]*$", text, re.M)
    assert match, f"no heading with {heading!r}: {FIX}"
    level = len(match.group(1))
    rest = text[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def missing_cli(text: str) -> list[str]:
    missing: list[str] = []
    for path, parser in pages.cli_commands():
        if f"`{path}`" not in text:
            missing.append(path)
            continue
        body = section(text, f"`{path}`")
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help") and f"`{option}" not in body:
                    missing.append(f"{path} {option}")
    return missing


def missing_config(text: str) -> list[str]:
    from deepagents.config import FileConfig, Settings

    missing = [
        f"DEEPAGENTS_{name.upper()}"
        for name in Settings.model_fields
        if f"`DEEPAGENTS_{name.upper()}`" not in text
    ]
    for path, model in pages.config_models(FileConfig):
        body = section(text, f"`{path}` ({model.__name__})")
        missing.extend(
            f"{path}.{field.alias or name}"
            for name, field in model.model_fields.items()
            if f"| `{field.alias or name}` |" not in body
        )
    return missing


def missing_metrics(text: str) -> list[str]:
    return [name for name, *_ in pages.metric_families() if f"| `{name}` |" not in text]


def missing_python(text: str) -> list[str]:
    missing: list[str] = []
    for package in pages.exported_packages():
        body = section(text, f"`{package}`")
        names = importlib.import_module(package).__all__
        missing.extend(f"{package}.{n}" for n in names if f"| `{n}` |" not in body)
    return missing


def missing_http(text: str) -> list[str]:
    return [
        f"{method.upper()} {path}"
        for path, item in pages.openapi()["paths"].items()
        for method in pages.METHODS
        if method in item and f"`{method.upper()} {path}`" not in text
    ]


CHECKS = {
    "cli.md": missing_cli,
    "config.md": missing_config,
    "metrics.md": missing_metrics,
    "python.md": missing_python,
    "http.md": missing_http,
}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_every_item_is_on_its_page(name: str) -> None:
    assert CHECKS[name](page(name)) == [], FIX


@pytest.mark.parametrize("name", sorted(pages.PAGES))
def test_page_is_what_the_generator_writes(name: str) -> None:
    assert page(name) == pages.PAGES[name](), FIX


def test_a_page_without_an_option_fails_the_check() -> None:
    """The check is not vacuous: remove one option's row and it is reported."""
    text = page("cli.md")
    row = next(line for line in text.splitlines() if line.startswith("| `--with-audit-writer`"))
    assert missing_cli(text.replace(row + "\n", "")) == ["deepagents worker --with-audit-writer"]


def test_a_new_config_key_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key added to a config model and not documented is reported by its path."""
    from deepagents.config.schema import DelegationConfig

    class Wider(DelegationConfig):
        undocumented_knob: int = 1

    real = pages.config_models

    def with_wider(root: type[BaseModel]) -> list[tuple[str, type[BaseModel]]]:
        return [(p, Wider if m is DelegationConfig else m) for p, m in real(root)]

    monkeypatch.setattr(pages, "config_models", with_wider)
    text = page("config.md").replace("(DelegationConfig)", "(Wider)")
    assert missing_config(text) == ["delegation.undocumented_knob"]


def test_a_metric_missing_from_its_page_fails_the_check() -> None:
    text = page("metrics.md")
    row = next(line for line in text.splitlines() if "`deepagents_dead_letters`" in line)
    assert missing_metrics(text.replace(row, "")) == ["deepagents_dead_letters"]


DOCS = pages.ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_index_links_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    linked = {(DOCS / target).resolve() for target in LINK.findall(index)}
    pages_ = [
        p
        for p in DOCS.rglob("*")
        if p.suffix in (".md", ".json", ".proto") and p.name != "index.md"
    ]
    assert pages_
    assert sorted(str(p.relative_to(DOCS)) for p in pages_ if p.resolve() not in linked) == []


@pytest.mark.parametrize(
    "name",
    [
        "index.md",
        "quickstart.md",
        *(f"howto/{p.name}" for p in sorted((DOCS / "howto").glob("*.md"))),
        *(f"reference/{n}" for n in sorted(pages.PAGES)),
    ],
)
def test_relative_links_resolve(name: str) -> None:
    path = DOCS / name
    targets = [t for t in LINK.findall(path.read_text()) if "://" not in t]
    assert [t for t in targets if not (path.parent / t).exists()] == []
