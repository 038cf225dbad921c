"""Tenant alpha's body flood as a process of its own, so that its clients do not share the
GIL of the process that times tenant beta's requests.

``python -m tests.gateway.alpha_flood URL CONNECTIONS`` posts ``INVALID_MIB`` to
``/v1/tasks`` over CONNECTIONS connections without pause. It says ``started`` once the
gateway has answered one of them (the flood is on, not just its threads), and stops once
its stdin has closed and alpha has been refused at least once (its parse budget spent:
on a fast machine the caller can be done before that), or a minute after that close at
most. Then it prints the status counts as one JSON object (0: the connection closed
mid-upload).
"""

from __future__ import annotations

import concurrent.futures as cf
import sys
import threading
from collections import Counter

import httpx
import orjson

from tests.gateway.procs import auth

MIB = 1_048_576
# Valid JSON of about 1 MiB of small integers, then a field the schema refuses (422).
INVALID_MIB = b'{"intent":"echo","payload":{"x":[' + b"1," * (MIB // 2 - 64) + b'1]},"bogus":1}'


def main(url: str, connections: int) -> None:
    stop, answered, refused = threading.Event(), threading.Event(), threading.Event()
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    headers = {**auth("alpha"), "Content-Type": "application/json"}

    def client() -> None:
        with httpx.Client(base_url=url, timeout=60, headers=headers) as http:
            while not stop.is_set():
                try:
                    status = http.post("/v1/tasks", content=INVALID_MIB).status_code
                except httpx.TransportError:
                    status = 0  # refused before the body was read: closed mid-upload
                with lock:
                    statuses[status] += 1
                answered.set()
                if status == 429:
                    refused.set()

    with cf.ThreadPoolExecutor(connections) as pool:
        futures = [pool.submit(client) for _ in range(connections)]
        answered.wait(60)
        sys.stdout.write("started\n")
        sys.stdout.flush()
        sys.stdin.read()  # until the test closes it
        refused.wait(60)
        stop.set()
        for future in futures:
            future.result()
    sys.stdout.write(orjson.dumps({str(k): n for k, n in statuses.items()}).decode() + "\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
