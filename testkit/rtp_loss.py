"""A lossy network between a test client and the server: the client's outbound audio
RTP packets dropped on the way, as chosen by their number (0 = the first sent)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any


class PacketLoss:
    """Drops the audio RTP packets ``lose(n)`` says of (``n`` counts them from 0)."""

    def __init__(self, lose: Callable[[int], bool]) -> None:
        self.lose = lose
        self.sent = 0  # audio RTP packets the client sent, lost ones included
        self.lost: list[int] = []

    def install(self, sender: Any) -> None:
        """Lose ``sender``'s packets from now on (after negotiation: with bundling the
        sender's DTLS transport is the one it will keep)."""
        transport = sender.transport
        send, ssrc = transport._send_rtp, sender._ssrc

        async def lossy(data: bytes) -> None:
            rtcp = 192 <= data[1] <= 223
            if not rtcp and int.from_bytes(data[8:12], "big") == ssrc:
                n, self.sent = self.sent, self.sent + 1
                if self.lose(n):
                    self.lost.append(n)
                    return
            await send(data)

        transport._send_rtp = lossy


def random_loss(percent: float, seed: int = 0, after: int = 0) -> Callable[[int], bool]:
    """Each packet from the ``after``-th on lost with probability ``percent`` %."""
    rng = random.Random(seed)
    return lambda n: n >= after and rng.random() * 100 < percent
