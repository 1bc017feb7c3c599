"""What a client's SDP offer and ICE candidates may contain, checked before aiortc sees them.

aiortc parses whatever it is given, and two of its habits are a client's lever:

- it splits the SDP with ``str.splitlines()``, which also ends a line at a bare CR,
  U+0085, U+2028 and five other characters. A check that counts ``"\\nm="`` then sees
  one media section where aiortc makes hundreds, each with its own receiver and decoder.
  We refuse any line break but CRLF and LF (RFC 8866 says CRLF; LF is what everyone
  tolerates), and count sections on the lines aiortc will see.
- every remote candidate becomes STUN binding requests from the server to the address
  the client named (a handful per candidate, with retransmissions): a UDP port sweep of
  any host, the server's own loopback and its private networks included. We drop the
  candidates toward ranges no peer can be in (unspecified, multicast, link-local,
  reserved) and, by the policy, loopback and private ones; the caller counts the rest
  against the peer connection's budget. Dropping a candidate never costs connectivity
  when the client can reach one of ours: its checks arrive and aioice learns its address
  as peer-reflexive.

What upstream would need: aiortc's parser accepting only CRLF/LF line ends and bounding
media sections; aioice a hook to vet remote candidates (resolved mDNS names included)
and a cap on the check list.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from aioice.mdns import is_mdns_hostname
from aiortc.sdp import candidate_from_sdp

CANDIDATE = "a=candidate:"

# What str.splitlines() ends a line at besides LF and CRLF (a CR is fine before an LF).
_ODD_BREAK = re.compile("\r(?!\n)|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")

# Why a candidate was dropped, as told to the client.
REASONS = {
    "loopback": "toward loopback",
    "private": "toward a private network",
    "mdns": "naming an mDNS (.local) host, resolved on the local network",
    "link-local": "toward a link-local address",
    "multicast": "toward a multicast address",
    "unspecified": "toward an unspecified address",
    "reserved": "toward a reserved address",
    "not-an-address": "naming a host that is not an IP address",
    "bad-port": "with a port outside 1-65535",
}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # embeds an IPv4 address a gateway reaches


class SdpRefused(ValueError):
    """The offer is refused; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def check_offer(sdp: str, max_bytes: int, max_sections: int) -> list[str]:
    """The offer's lines as aiortc will split them; raises :class:`SdpRefused` (400) for
    SDP that is plainly not an offer we can answer."""
    size = len(sdp.encode(errors="replace"))
    if size > max_bytes:
        raise SdpRefused(400, f"the SDP is too large: {size} bytes (limit {max_bytes})")
    if "\x00" in sdp:
        raise SdpRefused(400, "the SDP contains a NUL character")
    if not sdp.lstrip().startswith("v=0"):
        raise SdpRefused(400, "the SDP must start with v=0")
    odd = _ODD_BREAK.search(sdp)
    if odd is not None:
        found = f"U+{ord(odd.group()):04X}"
        raise SdpRefused(400, f"the SDP ends a line with {found}: only CRLF or LF may")
    lines = sdp.splitlines()
    sections = [line for line in lines if line.startswith("m=")]
    if not any(line.startswith("m=audio ") for line in sections):
        raise SdpRefused(400, "the SDP offer has no audio m-line")
    if len(sections) > max_sections:
        raise SdpRefused(400, f"the SDP has more than {max_sections} media sections")
    return lines


def address_class(host: str) -> str:
    """``global``, ``loopback``, ``private``, or a reason in :data:`REASONS`."""
    if is_mdns_hostname(host):
        return "mdns"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return "not-an-address"
    if ip.version == 6:  # an IPv4 address inside IPv6 is judged as that address
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(ip.packed[-4:])
    if ip.is_unspecified or (ip.version == 4 and ip.packed[0] == 0):
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_reserved:
        return "reserved"
    return "global" if ip.is_global else "private"


@dataclass(frozen=True)
class CandidatePolicy:
    """Which ranges a client's candidates may name, beyond global addresses."""

    loopback: bool = False
    private: bool = False

    @classmethod
    def for_client(
        cls, setting: Literal["auto"] | bool, client_host: str | None
    ) -> CandidatePolicy:
        """The policy for one request. ``auto``: private candidates from a client whose
        own address is private or loopback (it is on such a network), loopback ones only
        from a client on this machine; a client from anywhere else names global ones."""
        if setting != "auto":
            return cls(loopback=bool(setting), private=bool(setting))
        kind = address_class(client_host) if client_host else "not-an-address"
        return cls(loopback=kind == "loopback", private=kind in ("loopback", "private"))

    def refusal(self, host: str, port: int) -> str | None:
        """Why a candidate toward ``host:port`` is dropped (a key of :data:`REASONS`)."""
        if not 0 < port < 65536:
            return "bad-port"
        kind = address_class(host)
        if kind == "global" or (kind == "loopback" and self.loopback):
            return None
        if kind in ("private", "mdns"):  # an mDNS name resolves on the local network
            return None if self.private else kind
        return kind


def parse_candidate(text: str) -> tuple[str, int, str]:
    """A candidate's transport address ``(host, port, protocol)``; raises ``ValueError``."""
    try:
        candidate = candidate_from_sdp(text)
    except (AssertionError, ValueError, IndexError):
        raise ValueError(f"invalid ICE candidate: {text[:120]!r}") from None
    return candidate.ip, candidate.port, candidate.protocol.lower()


@dataclass
class Screened:
    """An offer with its disallowed candidates taken out."""

    sdp: str
    named: list[tuple[str, int, str]] = field(default_factory=list)  # distinct, kept
    refused: Counter[str] = field(default_factory=Counter)

    def note(self) -> str | None:
        """What was dropped, for the client (None when nothing was)."""
        return refusal_note(self.refused)


def screen_offer(sdp: str, lines: list[str], policy: CandidatePolicy) -> Screened:
    """``sdp`` (split into ``lines`` by :func:`check_offer`) without the candidates the
    policy refuses; raises :class:`SdpRefused` (400) for one aiortc could not parse."""
    kept: list[str] = []
    named: dict[tuple[str, int, str], None] = {}
    refused: Counter[str] = Counter()
    for line in lines:
        if line.startswith(CANDIDATE):
            try:
                address = parse_candidate(line[len(CANDIDATE) :])
            except ValueError as exc:
                raise SdpRefused(400, str(exc)) from None
            reason = policy.refusal(address[0], address[1])
            if reason is not None:
                refused[reason] += 1
                continue
            named[address] = None
        kept.append(line)
    if refused:  # else the client's own text, unchanged
        sdp = "\r\n".join(kept) + "\r\n"
    return Screened(sdp, list(named), refused)


def refusal_note(refused: Counter[str]) -> str | None:
    """``"3 candidates dropped: 2 toward loopback, 1 toward a private network"``."""
    total = sum(refused.values())
    if not total:
        return None
    parts = ", ".join(f"{n} {REASONS[reason]}" for reason, n in refused.most_common())
    plural = "s" if total > 1 else ""
    note = f"{total} candidate{plural} dropped: {parts}"
    if refused.keys() & {"loopback", "private", "mdns"}:
        note += " (the server's PARLEY_ALLOW_PRIVATE_CANDIDATES)"
    return note
