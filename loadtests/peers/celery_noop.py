"""A no-op task on Celery with its Redis broker, for bench_startup_peers.py."""

import os

from celery import Celery
from stamp import record

app = Celery("celery_noop", broker=os.environ["PEER_REDIS_URL"])


@app.task(name="noop")
def noop(i: int, t: int = 0) -> None:
    record(t)
