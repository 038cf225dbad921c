"""Issue 16, finding 5: request headers have a size cap, answered with 431.

httptools buffers headers without a bound: one 64 MB header answered 200. The gateway's
protocol (``gateway/http.py``) now refuses a field over 16 KiB or a head over 64 KiB (the
defaults) before the app sees the request, and stops reading a huge field at the cap.
"""

from __future__ import annotations

import socket

import httpx

from tests.gateway.procs import Gateway, auth

KIB = 1024
MIB = 1024 * KIB


def _raw(gateway: Gateway, head: bytes, *, then: bytes = b"", repeat: int = 0) -> bytes:
    return _raw_counted(gateway, head, then=then, repeat=repeat)[0]


def _raw_counted(
    gateway: Gateway, head: bytes, *, then: bytes = b"", repeat: int = 0
) -> tuple[bytes, int]:
    """Send ``head``, then ``then`` up to ``repeat`` times while the server listens: the
    server's whole answer, and how many bytes were sent before it closed."""
    sent = 0
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=20) as s:
        try:
            s.sendall(head)
            sent += len(head)
            for _ in range(repeat):
                s.sendall(then)
                sent += len(then)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed mid-upload, as it should be
        reply = b""
        try:
            while chunk := s.recv(65_536):
                reply += chunk
        except ConnectionResetError:
            pass
    return reply, sent


def _refused(reply: bytes) -> None:
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:200]
    assert b"application/problem+json" in reply and b'"code":"headers_too_large"' in reply


def test_one_field_over_16_kib_is_431(gateway: Gateway) -> None:
    big = b"x" * (17 * KIB)
    _refused(_raw(gateway, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + big + b"\r\n\r\n"))


def test_a_head_over_64_kib_is_431(gateway: Gateway) -> None:
    fields = b"".join(b"X-F%d: %s\r\n" % (i, b"v" * 1000) for i in range(70))
    _refused(_raw(gateway, b"GET /health HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n"))


def test_a_64_mib_header_is_cut_off_at_the_cap(gateway: Gateway) -> None:
    """The finding's case: the server answers 431 and closes long before 64 MiB arrive."""
    reply, sent = _raw_counted(
        gateway, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Huge: ", then=b"y" * MIB, repeat=64
    )
    _refused(reply)
    assert sent < 32 * MIB, f"the server read {sent} bytes of one header"


def test_headers_within_the_caps_and_large_bodies_are_served(gateway: Gateway) -> None:
    fields = {f"X-F{i}": "v" * 1000 for i in range(40)}  # 40 KiB in all
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        assert http.get("/health", headers={**fields, "X-Big": "x" * 15_000}).status_code == 200
        # A body arrives with its headers in one read: it is not counted as head.
        payload = {"blob": "z" * 60_000, "more": ["w" * 60_000] * 4}
        for _ in range(2):  # and again on the same connection
            r = http.post("/v1/tasks", json={"intent": "echo", "payload": payload}, headers=auth())
            assert r.status_code == 202, r.text[:300]
