"""Property-based fuzzing of the running gateway from its own OpenAPI document (schemathesis):
no 5xx, and every response (status, content type, headers, body) matches the document.

Hypothesis drives each operation directly (schemathesis's pytest plugin does not load
under pytest 9), bounded by ``max_examples`` so the whole run stays well under 2 minutes.
"""

from __future__ import annotations

from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, checks
from schemathesis.core.result import Ok
from schemathesis.specs.openapi import checks as openapi_checks

# schemathesis imports this module on first use, and pytest rewrites the asserts of a
# plugin's modules as they are imported. Imported in the middle of a test, that rewrite
# once failed on CPython 3.11 with "AST constructor recursion depth mismatch"
# (python/cpython#106905). Imported here, it happens at collection.
from schemathesis.specs.openapi import schemas as _schemas  # noqa: F401

from tests.gateway.procs import Gateway, Proc, auth
from tests.support.wait import eventually_sync

CHECKS = [
    checks.not_a_server_error,
    openapi_checks.response_schema_conformance,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
]
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def test_api_conforms_to_its_schema(
    gateway: Gateway, echo_worker: Proc, probe_worker: Proc
) -> None:
    # Start from a green deployment, so a 503 from /health?full=true is a real failure.
    eventually_sync(
        lambda: httpx.get(gateway.url + "/health?full=true", timeout=10).status_code == 200,
        timeout=30,
        interval=0.2,
        what="full health green",
    )
    schema = schemathesis.openapi.from_url(gateway.url + "/openapi.json")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result.err()
        operations.append(result.ok())
    assert len(operations) == 10
    for operation in operations:

        @SETTINGS
        @given(case=operation.as_strategy(), with_key=st.booleans())
        def check(case: Case[APIOperation[Any, Any, Any, Any]], with_key: bool) -> None:
            headers = dict(case.headers or {})
            if with_key:
                headers.update(auth())
            case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)

        check()
    assert httpx.get(gateway.url + "/health").status_code == 200
