"""UDP ports on 127.0.0.1 that count what reaches them, and SDP offers whose candidates
point at them: where a server's ICE checks go (tests and the hostile-client bench)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class Target(asyncio.DatagramProtocol):
    """A UDP port on 127.0.0.1 that counts the datagrams (STUN checks) reaching it."""

    def __init__(self) -> None:
        self.datagrams = 0
        self._heads: list[bytes] = []  # the first few datagrams, for :meth:`checks_for`

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.datagrams += 1
        if len(self._heads) < 16:
            self._heads.append(data[:512])

    def checks_for(self, ufrag: str) -> int:
        """Datagrams (of the first 16) naming ``ufrag``: a server's ICE checks toward the
        offer with that ufrag carry it in their USERNAME. Other tests' peers on this
        machine may reach a port once theirs (a port reused) and are not counted."""
        return sum(ufrag.encode() in head for head in self._heads)


@contextlib.asynccontextmanager
async def targets(count: int) -> AsyncIterator[list[tuple[int, Target]]]:
    """``count`` targets, as (port, target), closed on exit."""
    loop = asyncio.get_running_loop()
    opened = [
        await loop.create_datagram_endpoint(Target, local_addr=("127.0.0.1", 0))
        for _ in range(count)
    ]
    try:
        yield [(t.get_extra_info("sockname")[1], p) for t, p in opened]
    finally:
        for transport, _ in opened:
            transport.close()


def with_candidates(sdp: str, ports: list[int], host: str = "127.0.0.1") -> str:
    """``sdp`` with a host candidate toward ``host:port`` per port, in its last section
    (with max-bundle aiortc takes the bundle's candidates from the last one)."""
    return sdp + "".join(
        f"a=candidate:{n} 1 udp {2130706431 - n} {host} {port} typ host\r\n"
        for n, port in enumerate(ports)
    )
