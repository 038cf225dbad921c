"""The risk check of ``agents/risk.py`` as a pulling service (protocol v1, pull mode): it
asks a worker for tasks and posts their answers, with the standard library only.

    DEEPAGENTS_PULL_TOKEN=... python -m agents.remote.python.risk_puller \\
        --worker http://127.0.0.1:8790 --max-tasks 32 --wait-ms 1000

Each leased task is answered as ``risk_service.run`` answers it (the in-process agent's
own methods), or with the problem its own request would have been answered. ``--hold-ms``
holds each lease that long before answering, and ``--log`` writes one line per leased task
(tests kill the puller while it holds leases); ``--noop`` answers without the risk check
(benchmarks).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from agents.remote.python.risk_service import VERSION, run
from deepagents import InvalidInput


def answer(task: dict[str, Any], noop: bool) -> dict[str, Any]:
    head = {"lease": task["lease"], "id": task["task"]["id"]}
    if noop:
        return {**head, "result": {"status": "success", "output": {}}}
    try:
        return {**head, **run(task)}
    except InvalidInput as exc:
        return {**head, "problem": {"title": "invalid input", "status": 422, "detail": str(exc)}}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        return {**head, "problem": {"title": "bad request", "status": 400, "detail": detail}}


class Worker:
    """One keep-alive connection to the worker's lease endpoint. A worker not listening
    (not started yet, restarting) is asked again: its leases, if any, are the worker's to
    take back."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self._conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=600)
        self._headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}

    def post(self, call: str, body: dict[str, Any]) -> dict[str, Any]:
        while True:
            try:
                self._conn.request("POST", f"/v1/{call}", json.dumps(body), self._headers)
                response = self._conn.getresponse()
                break
            except (ConnectionError, http.client.HTTPException):
                self._conn.close()
                if call == "complete":
                    return {"outcomes": []}  # the worker that leased them is gone
                time.sleep(0.05)
        doc: dict[str, Any] = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(f"{call}: HTTP {response.status}: {doc.get('detail')}")
        return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", required=True, help="the worker's pull.listen, as a URL")
    parser.add_argument("--max-tasks", type=int, default=32)
    parser.add_argument("--wait-ms", type=int, default=1000)
    parser.add_argument("--hold-ms", type=int, default=0)
    parser.add_argument("--log", default=None)
    parser.add_argument("--noop", action="store_true")
    args = parser.parse_args(argv)
    token = os.environ.get("DEEPAGENTS_PULL_TOKEN", "")
    worker = Worker(args.worker, token)
    log = open(args.log, "a", buffering=1) if args.log else None  # noqa: SIM115
    sys.stdout.write("pulling\n")
    sys.stdout.flush()
    ask = {"max_tasks": args.max_tasks, "wait_ms": args.wait_ms, "version": VERSION}
    while True:
        tasks = worker.post("lease", ask)["tasks"]
        if not tasks:
            continue
        if log is not None:
            for task in tasks:
                log.write(json.dumps({"task": task["task"]["id"], "lease": task["lease"]}) + "\n")
        if args.hold_ms:
            time.sleep(args.hold_ms / 1000)
        outcomes = worker.post("complete", {"answers": [answer(t, args.noop) for t in tasks]})
        for outcome in outcomes["outcomes"]:
            if not outcome["accepted"]:
                sys.stderr.write(f"refused: {outcome['problem']['detail']}\n")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
