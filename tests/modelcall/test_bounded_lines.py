"""The stream reader's line splitter: every SSE line ending, any chunking, and its caps."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from deepagents.modelcall.providers.http import bounded_lines as _bounded_lines
from deepagents.modelcall.retrying import ErrorKind, ProviderError


async def _lines(chunks: list[bytes], max_line: int = 64, max_total: int = 1024) -> list[str]:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    response = httpx.Response(200, content=body())
    return [line async for line in _bounded_lines(response, max_line, max_total)]


@pytest.mark.parametrize(
    "chunks",
    [
        [b"data: a\n\ndata: b\n"],
        [b"data: a\r\n\r\ndata: b\r\n"],
        [b"data: a\r\rdata: b\r"],
        [b"da", b"ta: a\r", b"\n\r\nda", b"ta: b"],  # CRLF split across chunks
    ],
)
async def test_every_line_ending_and_chunking(chunks: list[bytes]) -> None:
    assert [x for x in await _lines(chunks) if x] == ["data: a", "data: b"]


@pytest.mark.parametrize(
    ("chunks", "max_line", "max_total"),
    [
        ([b"data: " + b"x" * 100], 64, 1024),  # one line over the line cap, never ended
        ([b"data: x\n" * 20] * 10, 64, 1024),  # short lines, over the total cap
    ],
)
async def test_over_a_cap_is_response_too_large(
    chunks: list[bytes], max_line: int, max_total: int
) -> None:
    with pytest.raises(ProviderError) as raised:
        await _lines(chunks, max_line, max_total)
    assert raised.value.kind is ErrorKind.RESPONSE_TOO_LARGE
