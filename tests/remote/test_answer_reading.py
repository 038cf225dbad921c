"""Reading a service's answers quickly without reading them differently.

``answers.py`` lets orjson read a body when it can only give what the strict parse would,
``batch.py`` measures a batch's answers by one encoding of them all when that fits, and
``expiry.py`` shares one timer among the futures given the same deadline. Each case here
holds for the strict parse and a per-answer measure alone; a quick path that read a number
differently, let a refused value or an answer over its limit through, or left a timer
behind fails it.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from deepagents.errors import RemoteProtocolError
from deepagents.remote.answers import (
    BadAnswer,
    Refused,
    SecretMask,
    parse_answer,
    parse_answers,
)
from deepagents.remote.batch import Batcher
from deepagents.remote.expiry import Expiries
from deepagents.remote.wire import RunAnswer

# Integers at the edges of what a result may hold (orjson reads the ones past 64 bits as
# floats: the quick path must leave them to the strict parse).
EDGES = [
    (b'{"n": 18446744073709551615}', 2**64 - 1),
    (b'{"n": -9223372036854775808}', -(2**63)),
    (b'{"n": 9999999999999999999}', 9999999999999999999),
    (b'{"n": 1234567890123456789.5}', 1234567890123456789.5),
]
REFUSED = [
    b'{"n": 18446744073709551616}',
    b'{"n": -9223372036854775809}',
    b'{"n": 123456789012345678901234567890}',
    b'{"n": 1e400}',
    b'{"n": -Infinity}',
    b'{"n": NaN}',
]


@pytest.mark.parametrize(("raw", "value"), EDGES)
def test_an_integer_at_the_edge_of_64_bits_is_read_exactly(raw: bytes, value: float) -> None:
    read = parse_answer(raw)["n"]
    assert read == value
    assert type(read) is type(value)
    doc, _ = parse_answers(b'{"answers": [' + raw + b"]}")
    assert doc["answers"][0]["n"] == value
    assert type(doc["answers"][0]["n"]) is type(value)
    assert not any(isinstance(v, Refused) for v in doc["answers"][0].values())


@pytest.mark.parametrize("raw", REFUSED)
def test_a_value_no_result_can_hold_is_refused(raw: bytes) -> None:
    with pytest.raises(BadAnswer):
        parse_answer(raw)
    doc, suspect = parse_answers(b'{"answers": [{"ok": 1}, ' + raw + b"]}")
    assert suspect
    assert doc["answers"][0] == {"ok": 1}  # the other answer is read as it is
    assert isinstance(doc["answers"][1]["n"], Refused)


def test_a_clean_body_is_read_as_the_standard_library_reads_it() -> None:
    raw = json.dumps(
        {"answers": [{"id": "t1", "s": 'é\u2028\\"', "f": 0.1, "n": [-1, 2**53, None]}]}
    ).encode()
    assert parse_answers(raw) == (json.loads(raw), False)


def test_a_lone_surrogate_is_left_for_the_caller_to_refuse() -> None:
    """orjson refuses it; the strict parse reads it, and says the body needs looking at
    (a batch then fails that answer alone, when it cannot be encoded)."""
    doc, suspect = parse_answers(b'{"answers": [{"s": "\\ud800"}]}')
    assert doc["answers"][0]["s"] == "\ud800"
    assert suspect


async def test_futures_given_one_deadline_share_its_timer() -> None:
    expiries = Expiries()
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(100)]
    dues = [expiries.add(future, 0.05) for future in futures]  # one turn, one timeout
    assert len(set(dues)) == len(expiries) < 10  # a timer per millisecond, not per future
    answered = futures[0]
    answered.set_result("done")
    expiries.discard(answered, dues[0])
    await asyncio.wait(futures[1:])
    assert all(isinstance(f.exception(), TimeoutError) for f in futures[1:])
    assert answered.result() == "done"
    assert len(expiries) == 0


async def test_a_timer_goes_once_nothing_waits_on_it() -> None:
    expiries = Expiries()
    loop = asyncio.get_running_loop()
    short, long = loop.create_future(), loop.create_future()
    due_short = expiries.add(short, 0.01)
    due_long = expiries.add(long, 30)
    assert len(expiries) == 2
    await asyncio.wait([short])
    assert isinstance(short.exception(), TimeoutError)
    expiries.discard(short, due_short)  # after its timer fired: nothing to do
    expiries.discard(long, due_long)
    assert len(expiries) == 0
    assert not long.done()
    long.cancel()


LIMIT = 4096  # one answer's size limit in these batches


def batch_body(output: bytes, other: bytes) -> bytes:
    """A batch's answer: task t1's output is ``output``, t2's ``other`` (raw JSON)."""
    return (
        b'{"answers": [{"id": "t1", "result": {"status": "success", "output": '
        + output
        + b'}}, {"id": "t2", "result": {"status": "success", "output": '
        + other
        + b"}}]}"
    )


async def one_answer_of_a_batch(
    output: bytes, other: bytes = b"{}"
) -> list[RunAnswer | BaseException]:
    """What each of the two tasks of ``batch_body(output, other)`` gets: the answer, or
    the error."""

    async def send(runs: list[dict[str, object]]) -> bytes:
        return batch_body(output, other)

    batcher = Batcher(
        send, max_tasks=2, max_wait_s=0, max_answer_bytes=LIMIT, max_requests=1,
        mask=SecretMask([]),
    )  # fmt: skip
    futures = [batcher.submit({"task": {"id": task_id}}) for task_id in ("t1", "t2")]
    done = await asyncio.gather(*futures, return_exceptions=True)
    await batcher.aclose()
    return done


@pytest.mark.parametrize(
    ("output", "said"),
    [
        (b"[" * 300 + b"]" * 300, "Recursion"),  # read by orjson, deeper than it writes
        (b"[" + b",".join([b"1e15"] * 700) + b"]", "over 4096"),  # encodes 4.5 times longer
    ],
)
async def test_an_answer_a_small_body_holds_is_still_measured_as_it_encodes(
    output: bytes, said: str
) -> None:
    first, second = await one_answer_of_a_batch(output)
    assert isinstance(first, RemoteProtocolError) and said in str(first), first
    assert isinstance(second, RunAnswer) and second.result is not None  # its own task only
    assert len(batch_body(output, b"{}")) < LIMIT  # the body's own size would have passed


async def test_answers_that_encode_within_the_limit_are_taken_as_read() -> None:
    first, second = await one_answer_of_a_batch(b'{"score": 1e15}', b'["a", 2]')
    assert isinstance(first, RunAnswer) and first.result is not None
    assert first.result.output == {"score": 1e15}
    assert isinstance(second, RunAnswer) and second.result is not None
    assert second.result.output == ["a", 2]


def test_a_new_event_loop_gets_timers_of_its_own() -> None:
    """A loop closed with a wait under way leaves its deadline behind: the next loop's
    future given the same millisecond must still get a timer of its own."""
    expiries = Expiries()

    async def left_waiting() -> int:
        return expiries.add(asyncio.get_running_loop().create_future(), 0.2)

    async def expires_at(due: int) -> bool:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        # Half a millisecond before the left deadline: rounded up, the same one.
        assert expiries.add(future, (due - 0.5) / 1000 - loop.time()) == due
        await asyncio.wait([future], timeout=5)
        return future.done() and isinstance(future.exception(), TimeoutError)

    due = asyncio.run(left_waiting())
    assert asyncio.run(expires_at(due))
