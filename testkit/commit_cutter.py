"""A TCP proxy on 127.0.0.1 in front of a real PostgreSQL that, once armed, loses the
server's answer to one ``COMMIT``: the transaction is committed, but the connection breaks
before the client hears so. The one outage a retry can get wrong (it would write twice);
PostgreSQL's wire protocol passes through untouched otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib

# CommandComplete ('C', length 11) with the tag "COMMIT".
COMMIT_DONE = b"C\x00\x00\x00\x0bCOMMIT\x00"


class CommitCutter:
    """Forwards connections to ``127.0.0.1:target``; :attr:`armed` cuts the next COMMIT."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0
        self.armed = False
        self.cuts = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> CommitCutter:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        """Stop listening, cut every connection and wait for their handlers."""
        if self._server is not None:
            self._server.close()
        for writer in self._open:
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _connection(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target)
        self._open |= {client_w, server_w}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, answers: bool) -> None:
            try:
                while data := await src.read(65536):
                    if answers and self.armed and COMMIT_DONE in data:
                        self.armed = False
                        self.cuts += 1
                        return  # committed on the server; the client never hears it
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                for writer in (client_w, server_w):
                    self._open.discard(writer)
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()

        await asyncio.gather(pipe(client_r, server_w, False), pipe(server_r, client_w, True))
