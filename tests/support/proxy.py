"""A TCP proxy in the test's event loop that can go silent, as a connection does when a
NAT or firewall drops its state, or a network partition cuts it."""

from __future__ import annotations

import asyncio


class SilencingProxy:
    """Forwards TCP to Redis; ``silence()`` makes every connection open now stop
    forwarding in both directions, for good, while staying open. New ones work."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.generation = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.url = f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    def silence(self) -> None:
        self.generation += 1

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers += [writer, up_writer]
        born = self.generation
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(src, dst, born))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, born: int) -> None:
        try:
            while data := await src.read(65536):
                if self.generation != born:
                    return  # silenced: swallow everything from now on, close nothing
                dst.write(data)
                await dst.drain()
        except ConnectionError:
            return  # one side went away: the other notices on its own

    async def close(self) -> None:
        self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in self.writers:
            writer.close()
        # Closed for good before the test's event loop ends, not left to the garbage
        # collector (a finalizer's warning then, in some later test).
        await asyncio.gather(*(w.wait_closed() for w in self.writers), return_exceptions=True)
        await self.server.wait_closed()
