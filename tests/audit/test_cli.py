"""The audit CLI: user mistakes give one clear line and a non-zero exit."""

from __future__ import annotations

import asyncio

import pytest

from deepagents.cli.main import main as cli


@pytest.fixture
def db_env(monkeypatch: pytest.MonkeyPatch, pg_url: str, schema: str) -> None:
    monkeypatch.setenv("DEEPAGENTS_DATABASE_URL", pg_url)
    monkeypatch.setenv("DEEPAGENTS_AUDIT_SCHEMA", schema)


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(cli, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_migrate_then_queries_and_mistakes(
    db_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = await run_cli(capsys, "audit", "show", "some-task")
    assert code == 1 and "deepagents db migrate" in err and err.count("\n") == 1
    code, out, _ = await run_cli(capsys, "db", "migrate")
    assert code == 0 and "applied 0001_audit_log" in out
    code, out, _ = await run_cli(capsys, "db", "migrate")
    assert code == 0 and "up to date" in out
    cases = [
        (("audit", "show", "no-such-task"), "no audit events for task no-such-task"),
        (("audit", "trace", "x'; DROP TABLE audit_log; --"), "is not a W3C trace id"),
        (("audit", "cost", "--since", "yesterday"), "is not a time"),
        (("audit", "cost", "--since", "1h", "--until", "2h"), "--since must be before --until"),
        (("db", "prune"), "--keep-days"),
    ]
    for argv, message in cases:
        code, _, err = await run_cli(capsys, *argv)
        assert code != 0 and message in err and err.count("\n") == 1, (argv, err)
    code, out, _ = await run_cli(
        capsys, "audit", "cost", "--since", "1d", "--by", "model", "--json"
    )
    assert code == 0 and '"rows": []' in out


async def test_no_database_configured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = await run_cli(capsys, "db", "migrate")
    assert code == 2 and "DEEPAGENTS_DATABASE_URL is not set" in err


async def test_unreachable_database(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DEEPAGENTS_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/nowhere")
    code, _, err = await run_cli(capsys, "audit", "show", "t")
    assert code == 1 and "cannot reach PostgreSQL" in err and err.count("\n") == 1


async def test_demo_helpers_start_a_migrated_embedded_database() -> None:
    from deepagents.cli.audit import show_task_trail
    from deepagents.config import Settings
    from deepagents.store.audit.embedded import database_if_needed
    from deepagents.store.audit.migrate import migrate

    settings = Settings()
    assert settings.database_url is None
    with database_if_needed(settings) as url:
        assert await migrate(url, settings.audit_schema)
        assert await show_task_trail(url, settings.audit_schema, "unknown") == 0
