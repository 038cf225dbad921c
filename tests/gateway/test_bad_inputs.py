"""RELIABILITY.md E1 against a real gateway process: every bad input is a 4xx problem
document that says what to fix, nothing reaches a stream, and the gateway keeps serving."""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.gateway.conftest import Deployment
from tests.gateway.procs import Gateway, auth

JSON = {"Content-Type": "application/json"}
PAST = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
FAR = (datetime.now(UTC) + timedelta(days=30)).isoformat()  # past the default horizon (1 day)
MIB = 1_048_576

# (name, raw body, headers on top of a valid key, expected status, expected code)
CASES: list[tuple[str, bytes, dict[str, str], int, str]] = [
    ("empty body", b"", JSON, 400, "empty_body"),
    ("null", b"null", JSON, 422, "validation_error"),
    ("array", b"[]", JSON, 422, "validation_error"),
    ("string", b'"s"', JSON, 422, "validation_error"),
    ("number", b"123", JSON, 422, "validation_error"),
    ("truncated", b'{"intent":"echo"', JSON, 400, "invalid_json"),
    ("trailing garbage", b"{} {}", JSON, 400, "invalid_json"),
    ("BOM", b'\xef\xbb\xbf{"intent":"echo"}', JSON, 400, "invalid_json"),
    ("UTF-16", '{"intent":"echo"}'.encode("utf-16"), JSON, 400, "invalid_json"),
    (
        "text/plain",
        b'{"intent":"echo"}',
        {"Content-Type": "text/plain"},
        415,
        "unsupported_media_type",
    ),
    (
        "form",
        b"intent=echo",
        {"Content-Type": "application/x-www-form-urlencoded"},
        415,
        "unsupported_media_type",
    ),
    ("no content type", b'{"intent":"echo"}', {}, 415, "unsupported_media_type"),
    ("duplicate intent", b'{"intent":"echo","intent":"risk_check"}', JSON, 400, "duplicate_key"),
    ("duplicate nested", b'{"intent":"echo","payload":{"a":1,"a":2}}', JSON, 400, "duplicate_key"),
    ("NaN", b'{"intent":"echo","payload":{"x":NaN}}', JSON, 400, "non_finite_number"),
    ("Infinity", b'{"intent":"echo","payload":{"x":-Infinity}}', JSON, 400, "non_finite_number"),
    ("1e400", b'{"intent":"echo","payload":{"x":1e400}}', JSON, 400, "non_finite_number"),
    (
        "5000 digits",
        b'{"intent":"echo","payload":{"x":' + b"9" * 5000 + b"}}",
        JSON,
        400,
        "number_too_long",
    ),
    (
        "10,000 deep",
        b'{"intent":"echo","payload":{"x":' + b"[" * 10_000 + b"]" * 10_000 + b"}}",
        JSON,
        400,
        "nesting_too_deep",
    ),
    (
        "40 deep",
        b'{"intent":"echo","payload":{"x":' + b"[" * 40 + b"]" * 40 + b"}}",
        JSON,
        400,
        "nesting_too_deep",
    ),
    ("NUL in string", b'{"intent":"echo","payload":{"x":"a\\u0000b"}}', JSON, 400, "bad_string"),
    ("lone surrogate", b'{"intent":"echo","payload":{"x":"\\ud800"}}', JSON, 400, "bad_string"),
    ("intent wrong type", b'{"intent":5}', JSON, 422, "validation_error"),
    ("payload wrong type", b'{"intent":"echo","payload":"x"}', JSON, 422, "validation_error"),
    ("priority out of range", b'{"intent":"echo","priority":10}', JSON, 422, "validation_error"),
    ("priority float", b'{"intent":"echo","priority":1.5}', JSON, 422, "validation_error"),
    ("hash-tag intent", b'{"intent":"echo:{0}"}', JSON, 422, "validation_error"),
    ("path intent", b'{"intent":"../../etc"}', JSON, 422, "validation_error"),
    ("unknown intent", b'{"intent":"does.not.exist"}', JSON, 422, "unknown_intent"),
    ("unknown field", b'{"intent":"echo","shard":3}', JSON, 422, "validation_error"),
    ("tenant in body", b'{"intent":"echo","tenant":"beta"}', JSON, 422, "validation_error"),
    ("task_id forged", b'{"intent":"echo","task_id":"x"}', JSON, 422, "validation_error"),
    (
        "deadline past",
        b'{"intent":"echo","deadline":"' + PAST.encode() + b'"}',
        JSON,
        422,
        "deadline_passed",
    ),
    (
        "deadline naive",
        b'{"intent":"echo","deadline":"2030-01-01T00:00:00"}',
        JSON,
        422,
        "validation_error",
    ),
    (
        "deadline Feb 30",
        b'{"intent":"echo","deadline":"2030-02-30T00:00:00Z"}',
        JSON,
        422,
        "validation_error",
    ),
    ("batch empty", b'{"tasks":[]}', JSON, 422, "validation_error"),
    (
        "not_before past the horizon",
        b'{"intent":"echo","not_before":"' + FAR.encode() + b'"}',
        JSON,
        422,
        "not_before_too_far",
    ),
    ("delay past horizon", b'{"intent":"echo","delay_s":1e300}', JSON, 422, "not_before_too_far"),
    ("delay zero", b'{"intent":"echo","delay_s":0}', JSON, 422, "validation_error"),
    ("delay a string", b'{"intent":"echo","delay_s":"5"}', JSON, 422, "validation_error"),
    (
        "delay and not_before",
        b'{"intent":"echo","delay_s":5,"not_before":"2030-01-01T00:00:00Z"}',
        JSON,
        422,
        "validation_error",
    ),
    (
        "not_before naive",
        b'{"intent":"echo","not_before":"2030-01-01T00:00:00"}',
        JSON,
        422,
        "validation_error",
    ),
    ("fairness weight 0", b'{"intent":"echo","fairness_weight":0}', JSON, 422, "validation_error"),
    (
        "fairness weight huge",
        b'{"intent":"echo","fairness_weight":1e9}',
        JSON,
        422,
        "validation_error",
    ),
    ("fairness key empty", b'{"intent":"echo","fairness_key":""}', JSON, 422, "validation_error"),
]


def _check_problem(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["content-type"] == "application/problem+json"
    doc = r.json()
    assert doc["code"] == code and doc["type"] == f"urn:deepagents:problem:{code}"
    assert doc["status"] == status and doc["title"]
    assert len(doc["detail"]) > 10, "a 4xx must say what to fix"


@pytest.fixture(scope="module")
def http(gateway: Gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        yield client


@pytest.fixture(autouse=True)
def nothing_enqueued(deployment: Deployment, http: httpx.Client) -> Iterator[None]:
    before = deployment.stream_lengths()
    yield
    assert deployment.stream_lengths() == before, "a refused request reached a stream"
    assert http.get("/health").status_code == 200, "the gateway stopped serving"


@pytest.mark.parametrize(
    ("name", "body", "headers", "status", "code"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_body(
    http: httpx.Client, name: str, body: bytes, headers: dict[str, str], status: int, code: str
) -> None:
    path = "/v1/tasks/batch" if name.startswith("batch") else "/v1/tasks"
    r = http.post(path, content=body, headers={**auth(), **headers})
    _check_problem(r, status, code)


def test_batch_names_the_bad_task(http: httpx.Client) -> None:
    body = {"tasks": [{"intent": "echo"}, {"intent": "echo", "deadline": PAST}, {"intent": "nope"}]}
    r = http.post("/v1/tasks/batch", json=body, headers=auth())
    _check_problem(r, 422, "deadline_passed")
    fields = {e["field"] for e in r.json()["errors"]}
    assert fields == {"tasks.1.deadline", "tasks.2.intent"}


def test_ten_mib_body_is_refused_by_length(http: httpx.Client) -> None:
    r = http.post("/v1/tasks", content=b"x" * (10 * MIB), headers={**auth(), **JSON})
    _check_problem(r, 413, "body_too_large")


def test_ten_mib_chunked_body_is_refused_while_streaming(gateway: Gateway) -> None:
    # 10 MiB in 64 KiB chunks, no Content-Length, and never the closing chunk: a gateway
    # that waits for the whole body before checking its size never answers 413 (its body
    # read times out with a 408 instead), so a 413 here was sent while the body streamed.
    chunk = b"10000\r\n" + b"[" * 65_536 + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=15) as s:
        s.sendall(
            b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: " + auth()["Authorization"].encode()
            + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        )  # fmt: skip
        while sent < 10 * MIB and not select.select([s], [], [], 0)[0]:
            try:
                s.sendall(chunk)
            except OSError:  # the gateway closed the connection mid-upload
                break
            sent += 65_536
        reply = _read_reply(s)
    assert reply.startswith(b"HTTP/1.1 413"), (sent, reply[:300])
    assert b'"code":"body_too_large"' in reply


def _read_reply(s: socket.socket) -> bytes:
    """Headers and JSON body of one reply (the body is one object: it ends with a brace)."""
    reply = b""
    while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
        try:
            chunk = s.recv(65_536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        reply += chunk
    return reply


def _raw_post(gateway: Gateway, declared: int, body: bytes, *, timeout: float) -> socket.socket:
    """POST /v1/tasks over a bare socket, with a Content-Length that need not be the truth."""
    s = socket.create_connection(("127.0.0.1", gateway.port), timeout=timeout)
    s.sendall(
        b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: "
        + auth()["Authorization"].encode()
        + f"\r\nContent-Length: {declared}\r\n\r\n".encode()
        + body
    )
    return s


def test_lying_content_length_does_not_hang_or_crash(gateway: Gateway) -> None:
    # Says 10 bytes, sends 1 MiB: the gateway reads 10, answers, and the rest is garbage.
    with _raw_post(gateway, 10, b"{" * MIB, timeout=10) as s:
        first = s.recv(4096)
    assert first.startswith(b"HTTP/1.1 400"), first[:200]


def test_slow_body_gets_408_and_the_connection_is_freed(gateway: Gateway) -> None:
    # Declares 100 bytes, sends 10, then nothing: answered once the body read times out
    # (1.5 s in the test config), not held open for as long as the client likes.
    with _raw_post(gateway, 100, b'{"intent":', timeout=15) as s:
        reply = b""
        while b"\r\n\r\n" not in reply or b"}" not in reply:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b'"code":"request_timeout"' in reply and b"within 1.5 s" in reply


def test_slow_headers_get_408_and_the_connections_are_freed(gateway: Gateway) -> None:
    """Slowloris (RELIABILITY row 51): 20 connections send their headers a byte every
    0.2 s, and one sends nothing. Each is closed once the header deadline (2 s in the test
    config) passes, however long it keeps sending, while the gateway serves others."""
    slow = [socket.create_connection(("127.0.0.1", gateway.port), timeout=5) for _ in range(20)]
    silent = socket.create_connection(("127.0.0.1", gateway.port), timeout=5)
    replies = {s: b"" for s in (*slow, silent)}
    still_open = set(replies)
    try:
        for s in slow:
            s.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: gateway\r\nX-Slow: ")
        give_up = time.monotonic() + 15
        while still_open and time.monotonic() < give_up:
            readable, _, _ = select.select(list(still_open), [], [], 0.2)
            for s in readable:
                try:
                    chunk = s.recv(4096)
                except ConnectionResetError:  # our last byte met the closed socket
                    chunk = b""
                replies[s] += chunk
                if not chunk:
                    still_open.discard(s)
            for s in still_open & set(slow) - set(readable):
                with contextlib.suppress(OSError):
                    s.sendall(b"a")  # one more header byte
        assert httpx.get(gateway.url + "/health", timeout=5).status_code == 200
    finally:
        for s in replies:
            s.close()
    assert not still_open, f"{len(still_open)} connections still open after 15 s"
    assert replies[silent].startswith(b"HTTP/1.1 408"), replies[silent][:200]
    assert b"did not arrive within 2.0 s" in replies[silent]
    answered = [r for s, r in replies.items() if s is not silent and r]
    assert all(r.startswith(b"HTTP/1.1 408") for r in answered)


@pytest.mark.parametrize(
    "header",
    [None, "Bearer", "Bearer wrong-key", "Basic dXNlcjpwYXNz", "bearer x", "Token " + "x" * 40],
)
def test_missing_or_wrong_key(http: httpx.Client, header: str | None) -> None:
    headers = {**JSON} if header is None else {**JSON, "Authorization": header}
    r = http.post("/v1/tasks", json={"intent": "echo"}, headers=headers)
    _check_problem(r, 401, "unauthorized")
    assert r.headers["www-authenticate"].startswith("Bearer")
    _check_problem(http.get("/v1/agents", headers=headers), 401, "unauthorized")


def test_unknown_path_and_method(http: httpx.Client) -> None:
    _check_problem(http.get("/v1/nothing", headers=auth()), 404, "not_found")
    _check_problem(http.delete("/v1/tasks", headers=auth()), 405, "method_not_allowed")
    _check_problem(http.get("/v1/tasks/a{b}", headers=auth()), 422, "validation_error")
    _check_problem(http.get("/v1/tasks/x?wait=abc", headers=auth()), 422, "validation_error")
