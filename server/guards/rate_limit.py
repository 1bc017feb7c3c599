"""Token buckets: one for a single stream of events, and a keyed set with bounded memory;
and the keys a client address is counted under.

A bucket holds up to ``burst`` tokens and gains ``rate`` tokens per second; each event
takes one. An empty bucket says how long until the next token, which is what a
``Retry-After`` header wants.

A client is counted under its address and under its network: a client that rotates
addresses (a host with a whole IPv6 /64, a pool of IPv4 addresses) stays in one network,
so a second, larger limit per network holds where the per-address one is dodged.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable

Clock = Callable[[], float]


class TokenBucket:
    """``rate`` events per second on average, up to ``burst`` at once."""

    __slots__ = ("_clock", "_last", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float, clock: Clock = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def take(self) -> float:
        """Take a token: 0.0 when there was one, else seconds until one is available."""
        self._refill(self._clock())
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate

    def is_full(self, now: float) -> bool:
        """Whether the bucket has refilled completely (it then remembers nothing)."""
        return self._tokens + (now - self._last) * self.rate >= self.burst


class KeyedRateLimiter:
    """One :class:`TokenBucket` per key (e.g. a client address), in bounded memory.

    A bucket that has refilled is forgotten (a fresh one is identical). Past ``max_keys``
    live buckets, the least recently used is dropped: under a spray of addresses a key
    may then get a fresh burst, but memory stays bounded.
    """

    def __init__(
        self,
        rate: float,
        burst: float,
        max_keys: int = 10_000,
        clock: Clock = time.monotonic,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._calls = 0

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str) -> float:
        """Take a token for ``key``: 0.0 when allowed, else seconds until it would be."""
        self._calls += 1
        if self._calls % 256 == 0:
            self.forget_idle()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.rate, self.burst, self._clock)
            self._buckets[key] = bucket
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.take()

    def forget(self, key: str) -> None:
        """Drop ``key``'s bucket (what it keyed is gone)."""
        self._buckets.pop(key, None)

    def forget_idle(self) -> None:
        """Drop every bucket that has refilled completely."""
        now = self._clock()
        for key in [k for k, b in self._buckets.items() if b.is_full(now)]:
            del self._buckets[key]


# The network a client address is counted in: what one site or one host usually has.
IPV4_NETWORK_BITS = 24
IPV6_NETWORK_BITS = 64


def client_keys(host: str | None) -> tuple[str, str]:
    """``(address, network)`` for per-client limits: the address in canonical form, and
    its /24 (IPv4) or /64 (IPv6). An IPv4-mapped IPv6 address counts as the IPv4 one;
    anything that is not an address (a test client's name) is its own network."""
    try:
        ip = ipaddress.ip_address(host or "")
    except ValueError:
        return host or "unknown", host or "unknown"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    bits = IPV4_NETWORK_BITS if ip.version == 4 else IPV6_NETWORK_BITS
    return str(ip), str(ipaddress.ip_network((ip, bits), strict=False))
