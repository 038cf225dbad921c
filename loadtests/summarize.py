"""Print locust's stats CSV as a Markdown table: throughput and p50/p95/p99 per request name.

With ``--gateway-cpu-s`` (the gateway process's CPU seconds over the run; likewise
``--worker-cpu-s``, ``--redis-cpu-s``, ``--locust-cpu-s``), also print CPU milliseconds
per request: steadier than req/s on a shared machine.
"""

from __future__ import annotations

import argparse
import csv
import sys


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("stats_csv")
    parser.add_argument("--gateway-cpu-s", type=float, default=None)
    parser.add_argument("--worker-cpu-s", type=float, default=None)
    parser.add_argument("--redis-cpu-s", type=float, default=None)
    parser.add_argument("--locust-cpu-s", type=float, default=None)
    args = parser.parse_args(argv)
    with open(args.stats_csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    print("| name | requests | failures | req/s | p50 ms | p95 ms | p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['Name']} | {row['Request Count']} | {row['Failure Count']} | "
            f"{float(row['Requests/s']):.0f} | {row['50%']} | {row['95%']} | {row['99%']} |"
        )
    total = next((r for r in rows if r["Name"] == "Aggregated"), rows[-1] if rows else None)
    count = int(total["Request Count"]) if total else 0
    print()
    for name, cpu_s in (
        ("gateway", args.gateway_cpu_s),
        ("worker(s)", args.worker_cpu_s),
        ("redis", args.redis_cpu_s),
        ("locust", args.locust_cpu_s),
    ):
        if cpu_s is not None and count:
            print(
                f"{name} CPU: {cpu_s:.1f} s for {count} requests "
                f"= {cpu_s * 1000 / count:.2f} ms per request"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
