"""The gateway's connections gather their writes until the end of the loop's step
(``gateway/http.py``, ``_GatheredWrites``): over a real loopback connection, what was
written arrives whole and in order, a close sends it first, and a large body still meets
the transport's flow control while it is being written."""

from __future__ import annotations

import asyncio

from deepagents.gateway.http import _GatheredWrites


class _Server(asyncio.Protocol):
    def __init__(self, chunks: list[bytes], close: bool) -> None:
        self.chunks = chunks
        self.close = close
        self.paused_while_writing = False
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        gathered = _GatheredWrites(transport, asyncio.get_running_loop())
        for chunk in self.chunks:
            gathered.write(chunk)
        self.paused_while_writing = self.paused  # before the loop's step ends
        if self.close:
            gathered.close()

    def pause_writing(self) -> None:
        self.paused = True


async def _serve(protocol: _Server) -> tuple[asyncio.Server, int]:
    server = await asyncio.get_running_loop().create_server(lambda: protocol, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_what_is_written_arrives_whole_in_order_and_before_the_close() -> None:
    protocol = _Server([b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"{}", b"tail"], True)
    server, port = await _serve(protocol)
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        received = await asyncio.wait_for(reader.read(), 10)  # to EOF: the close came last
        writer.close()
    assert received == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}tail"


async def test_a_large_body_meets_flow_control_while_it_is_written() -> None:
    # 32 MiB to a client that does not read: more than the kernel's buffers hold, so the
    # transport buffers the rest and pauses its protocol; written at once, not at the end
    # of the step, so the writer hears it before it has finished writing.
    chunk = b"x" * (1 << 20)
    protocol = _Server([chunk] * 32, False)
    server, port = await _serve(protocol)
    async with server:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):  # until the server side has written (it pauses either way)
            if protocol.paused:
                break
            await asyncio.sleep(0.05)
        writer.close()
    assert protocol.paused_while_writing
