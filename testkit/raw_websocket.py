"""A WebSocket client that does only what it is told, for hostile-client tests and benches:
it never answers a ping, never reads unless asked, and may bind its own source address
(127.0.0.x) and shrink its receive buffer, so a peer that stops reading is one call away.

Frames are built by hand (RFC 6455 section 5.2, masked as a client's must be).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct

TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA


def frame(opcode: int, payload: bytes = b"", fin: bool = True) -> bytes:
    """One masked client frame."""
    head = bytes([(0x80 if fin else 0) | opcode])
    size = len(payload)
    if size < 126:
        head += bytes([0x80 | size])
    elif size < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", size)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", size)
    mask = os.urandom(4)
    return head + mask + _mask(payload, mask)


def _mask(payload: bytes, mask: bytes) -> bytes:
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
        len(payload), "big"
    )


class RawWebSocket:
    """One connection: :meth:`open` does the handshake, then :meth:`send` what you like."""

    def __init__(self) -> None:
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.status = 0
        self.response = b""  # the handshake's answer: head, and a refusal's body

    async def open(
        self,
        host: str,
        port: int,
        path: str,
        headers: dict[str, str] | None = None,
        source: str | None = None,
        receive_buffer: int | None = None,
        within: float = 5.0,
    ) -> int:
        """Connect (from ``source``, if given) and ask for the upgrade; the HTTP status."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:  # before connect: the window is agreed then
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        if source is not None:
            sock.bind((source, 0))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), within)
        self.reader, self.writer = await asyncio.open_connection(sock=sock)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                 "Sec-WebSocket-Version: 13"]  # fmt: skip
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), within)
        self.response = head
        self.status = int(head.split(b" ", 2)[1])
        if self.status != 101:
            self.response += await asyncio.wait_for(self.reader.read(65536), within)
        return self.status

    async def send(self, data: bytes) -> None:
        """Raw bytes (frames made with :func:`frame`), waiting while the socket is full."""
        assert self.writer is not None
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self, within: float = 5.0) -> tuple[int, bytes]:
        """The server's next frame (opcode, payload); servers do not mask."""
        assert self.reader is not None
        first, second = await asyncio.wait_for(self.reader.readexactly(2), within)
        size = second & 0x7F
        if size == 126:
            (size,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif size == 127:
            (size,) = struct.unpack("!Q", await self.reader.readexactly(8))
        return first & 0x0F, await asyncio.wait_for(self.reader.readexactly(size), within)

    async def closed_by_server(self, within: float) -> bool:
        """Whether the server ends the connection (EOF or reset) within ``within`` s,
        reading and dropping whatever it sends meanwhile."""
        assert self.reader is not None
        try:
            async with asyncio.timeout(within):
                while await self.reader.read(65536):
                    pass
        except TimeoutError:
            return False
        except OSError:
            return True
        return True

    async def close_frame(self, within: float) -> tuple[int, str] | None:
        """The server's close (code, reason) if it sends one within ``within`` s, reading
        past its other frames; ``(1006, "")`` if it ends the connection without one."""
        try:
            async with asyncio.timeout(within):
                while True:
                    opcode, payload = await self.read_frame(within)
                    if opcode == CLOSE:
                        code = struct.unpack("!H", payload[:2])[0] if payload else 1005
                        return code, payload[2:].decode(errors="replace")
        except TimeoutError:
            return None
        except (OSError, asyncio.IncompleteReadError):
            return 1006, ""

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()


def close_payload(code: int, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode()
