"""A STAND-IN for HashiCorp Vault, on loopback, for tests only (no Vault can be installed).

It serves the three endpoints deepagents uses, shaped as Vault's HTTP API documents them:
``GET /v1/<mount>/data/<path>`` (KV v2 read: ``data.data`` + ``data.metadata.version``),
``GET /v1/auth/token/lookup-self`` (``data.ttl``, ``data.renewable``) and
``POST /v1/auth/token/renew-self`` (``auth.client_token``, ``auth.lease_duration``).
Errors come back as ``{"errors": [...]}`` with 403 (bad token) or 503 (``down``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class VaultStandIn:
    def __init__(
        self,
        *,
        token: str = "hvs.standin-token",
        ttl_s: int = 3600,
        renewable: bool = True,
        mount: str = "secret",
    ) -> None:
        self.token = token
        self.ttl_s = ttl_s
        self.renewable = renewable
        self.mount = mount
        self.secrets: dict[str, list[dict[str, Any]]] = {}  # path -> versions (1-based)
        self.down = False
        self.counts = {"read": 0, "lookup": 0, "renew": 0, "denied": 0}
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> VaultStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def put(self, path: str, data: dict[str, Any]) -> int:
        """Write a new version (as ``vault kv put``); returns its number."""
        with self.lock:
            self.secrets.setdefault(path, []).append(dict(data))
            return len(self.secrets[path])

    def _answer(self, method: str, path: str, token: str | None) -> tuple[int, dict[str, Any]]:
        if self.down:
            return 503, {"errors": ["Vault is sealed"]}
        if token != self.token:
            self.counts["denied"] += 1
            return 403, {"errors": ["permission denied"]}
        if method == "GET" and path == "/v1/auth/token/lookup-self":
            self.counts["lookup"] += 1
            return 200, {
                "data": {
                    "id": self.token,
                    "ttl": self.ttl_s,
                    "renewable": self.renewable,
                    "policies": ["default"],
                    "type": "service",
                }
            }
        if method == "POST" and path == "/v1/auth/token/renew-self":
            self.counts["renew"] += 1
            if not self.renewable:
                return 400, {"errors": ["lease is not renewable"]}
            return 200, {
                "auth": {
                    "client_token": self.token,
                    "lease_duration": self.ttl_s,
                    "renewable": True,
                    "policies": ["default"],
                }
            }
        prefix = f"/v1/{self.mount}/data/"
        if method == "GET" and path.startswith(prefix):
            self.counts["read"] += 1
            versions = self.secrets.get(path[len(prefix) :].split("?", 1)[0])
            if not versions:
                return 404, {"errors": []}
            return 200, {
                "request_id": "standin",
                "lease_id": "",
                "renewable": False,
                "lease_duration": 0,
                "data": {
                    "data": versions[-1],
                    "metadata": {
                        "version": len(versions),
                        "deletion_time": "",
                        "destroyed": False,
                        "created_time": "2026-01-01T00:00:00Z",
                        "custom_metadata": None,
                    },
                },
            }
        return 404, {"errors": []}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                with standin.lock:
                    status, body = standin._answer(
                        self.command, self.path, self.headers.get("X-Vault-Token")
                    )
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _serve
            do_POST = _serve

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        return Handler
