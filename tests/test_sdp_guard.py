"""The SDP and candidate checks on their own (server/media/sdp_guard.py), the keys a client is
counted under (server/guards/rate_limit.py), and the aiortc behaviour they stand in front of:
if aiortc changes how it splits lines or parses candidates, a test here fails."""

from __future__ import annotations

import sys
from collections import Counter

import pytest
from aiortc.sdp import SessionDescription, grouplines

from server.guards.rate_limit import KeyedRateLimiter, client_keys
from server.media.sdp_guard import (
    CandidatePolicy,
    SdpRefused,
    address_class,
    check_offer,
    refusal_note,
    screen_offer,
)

HEAD = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
AUDIO = (
    "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\n"
    "a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n"
    "a=fingerprint:sha-256 00:11\r\na=setup:actpass\r\na=rtpmap:111 opus/48000/2\r\n"
)


def candidate(host: str, port: int = 5000, n: int = 1) -> str:
    return f"a=candidate:{n} 1 udp 2130706431 {host} {port} typ host"


# -- line breaks and media sections ----------------------------------------------------------


def test_our_refused_line_breaks_are_exactly_what_splitlines_adds_to_lf() -> None:
    """Every character str.splitlines() ends a line at, but LF and the CR of a CRLF, is
    refused; nothing else is."""
    breaks = {chr(c) for c in range(sys.maxunicode + 1) if len(f"a{chr(c)}b".splitlines()) == 2}
    refused = set()
    for char in breaks:
        try:
            check_offer(HEAD + AUDIO.replace("\r\nc=", f"{char}c="), 32768, 16)
        except SdpRefused as exc:
            assert exc.status == 400 and "only CRLF or LF" in str(exc)
            refused.add(char)
    assert breaks - refused == {"\n"}
    assert refused == set("\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def test_aiortc_still_splits_sdp_lines_with_splitlines() -> None:
    """Why the odd breaks are refused: aiortc makes a media section of each, so a count of
    "\\nm=" would see one where aiortc sees three. If this fails aiortc changed; the guard
    may then be relaxed, never dropped unchecked."""
    sdp = HEAD + "m=audio 9 X 0\rm=audio 9 X 0\x85m=audio 9 X 0\r\n"
    _, media = grouplines(sdp)
    assert len(media) == 3
    assert sdp.replace("\r\n", "\n").count("\nm=") == 1


def test_sections_are_counted_on_the_lines_aiortc_sees() -> None:
    lf = (HEAD + AUDIO * 3).replace("\r\n", "\n")
    lines = check_offer(lf, 32768, 16)
    assert sum(line.startswith("m=") for line in lines) == 3
    assert len(SessionDescription.parse(lf).media) == 3
    with pytest.raises(SdpRefused, match="more than 2 media sections"):
        check_offer(HEAD + AUDIO * 3, 32768, 2)


@pytest.mark.parametrize(
    ("sdp", "error"),
    [
        (HEAD + AUDIO + "a=x:" + "p" * 2000 + "\r\n", "too large"),
        (HEAD + AUDIO + "\x00", "NUL"),
        ("o=- 1 1 IN IP4 0.0.0.0\r\n" + AUDIO, "must start with v=0"),
        (HEAD + AUDIO.replace("m=audio", "m=video"), "no audio m-line"),
    ],
)
def test_offers_we_cannot_answer_are_refused(sdp: str, error: str) -> None:
    with pytest.raises(SdpRefused, match=error) as refused:
        check_offer(sdp, 2048, 16)
    assert refused.value.status == 400


# -- where a candidate may point ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("8.8.8.8", "global"),
        ("2001:4860:4860::8888", "global"),
        ("127.0.0.1", "loopback"),
        ("127.3.4.5", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped: judged as the IPv4 address
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),  # carrier-grade NAT
        ("fd00::2", "private"),
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("fe80::1", "link-local"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("abcd-1234.local", "mdns"),
        ("example.com", "not-an-address"),
    ],
)
def test_address_classes(host: str, kind: str) -> None:
    assert address_class(host) == kind


@pytest.mark.parametrize(
    ("setting", "client", "loopback", "private"),
    [
        ("auto", "127.0.0.1", True, True),  # this machine: tests, make run
        ("auto", "192.168.1.20", False, True),  # a LAN client
        ("auto", "203.0.113.9", False, True),  # documentation range: not global
        ("auto", "8.8.8.8", False, False),  # the internet
        ("auto", "testclient", False, False),  # not an address: trusted with nothing
        ("auto", None, False, False),
        (True, "8.8.8.8", True, True),
        (False, "127.0.0.1", False, False),
    ],
)
def test_policy_follows_the_clients_own_network(
    setting: str | bool, client: str | None, loopback: bool, private: bool
) -> None:
    assert CandidatePolicy.for_client(setting, client) == CandidatePolicy(loopback, private)  # type: ignore[arg-type]


def test_policy_refusals() -> None:
    everything = CandidatePolicy(loopback=True, private=True)
    nothing = CandidatePolicy()
    assert nothing.refusal("8.8.8.8", 3478) is None
    assert nothing.refusal("127.0.0.1", 3478) == "loopback"
    assert nothing.refusal("10.0.0.1", 3478) == "private"
    assert nothing.refusal("abcd.local", 3478) == "mdns", "it resolves on the LAN"
    assert everything.refusal("abcd.local", 3478) is None
    for never in ("169.254.169.254", "224.0.0.1", "0.0.0.0", "fe80::1", "example.com"):
        assert everything.refusal(never, 3478) is not None, never
    assert everything.refusal("8.8.8.8", 0) == "bad-port"
    assert everything.refusal("8.8.8.8", 70000) == "bad-port"


def test_screening_strips_refused_candidates_before_aiortc() -> None:
    lines = [
        candidate("8.8.8.8", 5000, 1),
        candidate("8.8.8.8", 5000, 2),  # the same transport address again
        candidate("127.0.0.1", 5001, 3),
        candidate("10.0.0.1", 5002, 4),
        candidate("169.254.169.254", 80, 5),
    ]
    sdp = HEAD + AUDIO + "\r\n".join(lines) + "\r\n"
    screened = screen_offer(sdp, check_offer(sdp, 32768, 16), CandidatePolicy())
    assert screened.named == [("8.8.8.8", 5000, "udp")]
    assert screened.refused == Counter({"loopback": 1, "private": 1, "link-local": 1})
    parsed = SessionDescription.parse(screened.sdp)
    assert [c.ip for c in parsed.media[0].ice_candidates] == ["8.8.8.8", "8.8.8.8"]
    assert screened.note() == (
        "3 candidates dropped: 1 toward loopback, 1 toward a private network, "
        "1 toward a link-local address (the server's PARLEY_ALLOW_PRIVATE_CANDIDATES)"
    )
    clean = HEAD + AUDIO + candidate("8.8.8.8") + "\r\n"
    untouched = screen_offer(clean, check_offer(clean, 32768, 16), CandidatePolicy())
    assert untouched.sdp is clean and untouched.note() is None


def test_an_unparseable_candidate_refuses_the_offer() -> None:
    sdp = HEAD + AUDIO + "a=candidate:1 1 udp\r\n"
    with pytest.raises(SdpRefused, match="invalid ICE candidate") as refused:
        screen_offer(sdp, check_offer(sdp, 32768, 16), CandidatePolicy())
    assert refused.value.status == 400


def test_refusal_note_mentions_the_setting_only_when_it_applies() -> None:
    assert refusal_note(Counter()) is None
    assert (
        refusal_note(Counter({"multicast": 1}))
        == "1 candidate dropped: 1 toward a multicast address"
    )


# -- the keys a client is counted under -----------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "keys"),
    [
        ("203.0.113.9", ("203.0.113.9", "203.0.113.0/24")),
        ("::ffff:203.0.113.9", ("203.0.113.9", "203.0.113.0/24")),
        ("2001:db8:1:2:3:4:5:6", ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64")),
        ("2001:DB8:1:2::7", ("2001:db8:1:2::7", "2001:db8:1:2::/64")),
        ("testclient", ("testclient", "testclient")),
        (None, ("unknown", "unknown")),
    ],
)
def test_client_keys(host: str | None, keys: tuple[str, str]) -> None:
    assert client_keys(host) == keys


def test_a_forgotten_key_starts_with_a_full_bucket() -> None:
    limiter = KeyedRateLimiter(rate=0.001, burst=1)
    assert limiter.take("pc") == 0.0 and limiter.take("pc") > 0
    limiter.forget("pc")  # its session is gone
    assert limiter.take("pc") == 0.0 and len(limiter) == 1
