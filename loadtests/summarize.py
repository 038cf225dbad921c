"""Print locust's stats CSV as a Markdown table: throughput and p50/p95/p99 per request name."""

from __future__ import annotations

import csv
import sys


def main(path: str) -> int:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    print("| name | requests | failures | req/s | p50 ms | p95 ms | p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['Name']} | {row['Request Count']} | {row['Failure Count']} | "
            f"{float(row['Requests/s']):.0f} | {row['50%']} | {row['95%']} | {row['99%']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
