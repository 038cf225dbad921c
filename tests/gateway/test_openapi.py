"""The committed docs/openapi.json is the document the app serves (regenerate with
``python -m deepagents.gateway.openapi docs/openapi.json``)."""

from __future__ import annotations

import httpx
import orjson

from deepagents.gateway.openapi import offline_app, render
from tests.gateway.procs import ROOT, Gateway

COMMITTED = ROOT / "docs" / "openapi.json"


def test_committed_document_matches_the_app() -> None:
    assert COMMITTED.read_bytes() == render(offline_app()), (
        "docs/openapi.json is stale: run python -m deepagents.gateway.openapi docs/openapi.json"
    )


def test_served_document_matches_the_committed_one(gateway: Gateway) -> None:
    served = httpx.get(gateway.url + "/openapi.json").json()
    assert served == orjson.loads(COMMITTED.read_bytes())


def test_every_error_response_is_a_problem_document() -> None:
    doc = orjson.loads(COMMITTED.read_bytes())
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")) and path != "/health":
                    assert list(response["content"]) == ["application/problem+json"], (
                        path,
                        method,
                        status,
                    )
