"""The risk check of ``agents/risk.py`` as a remote agent (protocol v1), on the standard
library's HTTP server: ``python -m agents.remote.python.risk_service --port N``.

It answers each step with ``RiskAgent``'s own method, so its answers are the in-process
agent's by construction; it shows how little a service has to do.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents.risk import RiskAgent
from deepagents import InvalidInput, Result, Task

MAX_BODY = 1 << 20
AGENT = RiskAgent()
VERSION = AGENT.version  # what its health answer reports: the in-process agent's own


def _task(body: dict[str, Any]) -> Task:
    wire = body["task"]
    return Task(
        task_id=wire["id"], intent=wire["intent"], payload=wire["payload"], tenant=wire["tenant"]
    )


def can_handle(body: dict[str, Any]) -> dict[str, Any]:
    return {"can_handle": bool(AGENT.can_handle(_task(body)))}


def prepare_context(body: dict[str, Any]) -> dict[str, Any]:
    AGENT.prepare_context(_task(body))  # validates: InvalidInput answers 422
    return {"context": {"order": body["task"]["payload"]}}


def execute(body: dict[str, Any]) -> dict[str, Any]:
    # A service without prepare_context gets an empty context: the task has the order.
    order = body.get("context", {}).get("order", body["task"]["payload"])
    task = _task(body).model_copy(update={"payload": order})
    result = AGENT.execute(AGENT.prepare_context(task))
    return {"result": {"status": result.status.value, "output": result.output}}


def post_process(body: dict[str, Any]) -> dict[str, Any]:
    result = Result.model_validate({k: body["result"][k] for k in ("status", "output")})
    return {"metrics": AGENT.post_process(result)}


def run(body: dict[str, Any]) -> dict[str, Any]:
    """The whole contract of one task in one call, as a worker would run the four steps."""
    if not can_handle(body)["can_handle"]:
        return {"can_handle": False}
    executed = execute({**body, **prepare_context(body)})["result"]
    metrics = post_process({**body, "result": executed})["metrics"]
    return {"result": {**executed, "metrics": metrics}}


def run_batch(body: dict[str, Any]) -> dict[str, Any]:
    """Several tasks in one request, each answered on its own: one that fails has its own
    problem, with the status its own request would have been answered."""
    answers = []
    for one in body["runs"]:
        task_id = one["task"]["id"]
        try:
            answers.append({"id": task_id, **run(one)})
        except InvalidInput as exc:
            problem = {"title": "invalid input", "status": 422, "detail": str(exc)}
            answers.append({"id": task_id, "problem": problem})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            detail = f"{type(exc).__name__}: {exc}"
            answers.append({"id": task_id, "problem": {"title": "bad request", "status": 400,
                                                       "detail": detail}})  # fmt: skip
    return {"answers": answers}


STEPS = {
    "can_handle": can_handle,
    "prepare_context": prepare_context,
    "execute": execute,
    "post_process": post_process,
    "run": run,
    "run_batch": run_batch,
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # headers and body go in two writes: no 40 ms stall

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would be most of the service's work

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        kind = "application/json" if status < 300 else "application/problem+json"
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _problem(self, status: int, title: str, detail: str) -> None:
        problem = {"type": "about:blank", "title": title, "status": status, "detail": detail}
        self._send(status, problem)

    def do_GET(self) -> None:
        if self.path == "/v1/health":
            self._send(200, {"status": "ok", "version": VERSION, "methods": list(STEPS)})
        else:
            self._problem(404, "not found", self.path)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            self._problem(413, "body too large", f"over {MAX_BODY} bytes")
            return
        raw = self.rfile.read(length)
        step = STEPS.get(self.path.removeprefix("/v1/")) if self.path.startswith("/v1/") else None
        if step is None:
            self._problem(404, "no such step", self.path)
            return
        try:
            body = json.loads(raw)
            if body.get("protocol") != 1:
                raise ValueError("not a protocol v1 request")
            answer = step(body)
        except InvalidInput as exc:
            self._problem(422, "invalid input", str(exc))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._problem(400, "bad request", f"{type(exc).__name__}: {exc}")
        else:
            self._send(200, answer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8788)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    sys.stdout.write(f"listening {server.server_address[1]}\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
