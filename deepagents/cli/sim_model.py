"""``deepagents sim-model``: run the model SIMULATOR (a server on loopback speaking OpenAI chat
completions and embeddings, and the Anthropic Messages API).

It is not a model: it answers with deterministic filler text (or the tool calls that
``sim:`` directives in the messages script), and misbehaves on request (latency, slow
tokens, random 503s, scripted 429/503 bursts, stalls, expiring keys, its own rate limits,
a context window). Point a model's ``base_url`` at the printed URL to use it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from deepagents.cli.common import run
from deepagents.errors import ConfigError
from deepagents.modelcall.simulator import Action, SimSettings, Simulator


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sim-model",
        help="run the model simulator (OpenAI and Anthropic APIs, loopback only; not a model)",
        description=__doc__,
    )
    add = parser.add_argument
    add("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    add("--latency-ms", type=float, default=0.0, help="delay before the response headers")
    add("--first-token-ms", type=float, default=0.0, help="streams: delay to the first token")
    add("--token-rate", type=float, default=0.0, help="streams: tokens per second (0: no limit)")
    add("--completion-tokens", type=int, default=12, help="length of every answer")
    add("--error-rate", type=float, default=0.0, help="share of requests answered 503 (0-1)")
    add(
        "--burst",
        action="append",
        default=[],
        metavar="STATUS:COUNT[:RETRY_AFTER_S]",
        help="answer the next COUNT requests with STATUS (e.g. 429:3:2 or 503:2); repeatable",
    )
    add(
        "--stall-after",
        type=int,
        help="streams: the next --stall-count answers stall after N tokens",
    )
    add("--stall-count", type=int, default=1)
    add("--stall-ms", type=float, default=60_000)
    add("--key", action="append", default=[], help="accepted API key (enables key checks)")
    add("--key-ttl-s", type=float, help="keys expire this long after start")
    add("--rpm", type=int, help="the simulated provider's requests per window")
    add("--tpm", type=int, help="the simulated provider's tokens per window")
    add("--window-s", type=float, default=60.0)
    add("--seed", type=int, help="seed of the random error choice")
    add("--context-tokens", type=int, help="refuse longer prompts: context_length_exceeded")
    add("--embedding-dims", type=int, default=8, help="length of every embedding vector")
    parser.set_defaults(func=main)


def _check(args: argparse.Namespace) -> None:
    if not 0 <= args.error_rate <= 1:
        raise ConfigError("must be between 0 and 1", field="--error-rate")
    if not 0 <= args.port <= 65_535:
        raise ConfigError("must be a port number (0-65535)", field="--port")
    for name in ("latency_ms", "first_token_ms", "token_rate", "stall_ms", "window_s"):
        if getattr(args, name) < 0:
            raise ConfigError("must not be negative", field="--" + name.replace("_", "-"))
    if args.completion_tokens < 1:
        raise ConfigError("must be at least 1", field="--completion-tokens")
    if args.context_tokens is not None and args.context_tokens < 1:
        raise ConfigError("must be at least 1", field="--context-tokens")
    if not 1 <= args.embedding_dims <= 65_536:
        raise ConfigError("must be between 1 and 65536", field="--embedding-dims")


def _bursts(specs: list[str]) -> list[Action]:
    actions: list[Action] = []
    for spec in specs:
        parts = spec.split(":")
        try:
            status, count = int(parts[0]), int(parts[1])
            retry_after = float(parts[2]) if len(parts) > 2 else None
        except (ValueError, IndexError):
            raise ConfigError(
                f"{spec!r} is not STATUS:COUNT[:RETRY_AFTER_S]", field="--burst"
            ) from None
        if not 400 <= status <= 599 or count < 1 or len(parts) > 3:
            raise ConfigError(f"{spec!r}: STATUS must be 400-599 and COUNT >= 1", field="--burst")
        actions += [Action(status, retry_after) for _ in range(count)]
    return actions


def build(args: argparse.Namespace) -> Simulator:
    _check(args)
    settings = SimSettings(
        latency_s=args.latency_ms / 1000,
        first_token_s=args.first_token_ms / 1000,
        token_rate=args.token_rate,
        completion_tokens=args.completion_tokens,
        error_rate=args.error_rate,
        require_key=bool(args.key),
        rpm=args.rpm,
        tpm=args.tpm,
        window_s=args.window_s,
        seed=args.seed,
        context_tokens=args.context_tokens,
        embedding_dims=args.embedding_dims,
    )
    sim = Simulator(settings, port=args.port)
    sim.push(*_bursts(args.burst))
    if args.stall_after is not None:
        sim.push(
            *(
                Action(stall_after=args.stall_after, stall_s=args.stall_ms / 1000)
                for _ in range(args.stall_count)
            )
        )
    for key in args.key:
        sim.issue_key(key, args.key_ttl_s)
    return sim


async def _serve(sim: Simulator) -> None:
    try:
        await sim.start()
    except OSError as exc:
        raise ConfigError(f"cannot listen on 127.0.0.1: {exc.strerror}", field="--port") from exc
    print(f"deepagents model SIMULATOR (not a real model) listening on {sim.url}", flush=True)
    print(
        "control: GET /sim/stats, POST /sim/settings|script|keys|reset; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    try:
        await asyncio.Event().wait()
    finally:
        await sim.stop()


def main(args: argparse.Namespace) -> int:
    run(_serve(build(args)))
    return 0
