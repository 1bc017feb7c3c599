"""Hypothesis strategies for tests/test_fuzz.py: JSON bodies, ICE candidates, SDP, RTVI.

Strategies are built once, at import: one built inside a test or a draw is rebuilt (and
re-checked) on every example, which is what makes property tests slow.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from hypothesis import strategies as st

# -- JSON and HTTP --------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=24),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=6,
)  # fmt: skip

BODY_FIELDS = [
    "sdp", "type", "pc_id", "restart_pc", "requestData", "request_data", "body", "candidates",
    "candidate", "sdp_mid", "sdp_mline_index", "transport", "enableDefaultIceServers",
]  # fmt: skip
CANDIDATE_TEMPLATES = [
    "candidate:{f} {c} {p} {prio} {host} {port} typ {t}",
    "{f} {c} {p} {prio} {host} {port} typ {t} raddr {host} rport {port}",
    "candidate:{f} {c} {p} {prio} {host} {port} typ {t} tcptype passive",
    "{f} {c}",
    "",
]
# Loopback or no address at all: a fuzzer must not make the server probe real hosts.
HOSTS = ["127.0.0.1", "::1", "0.0.0.0", "localhost", "not-an-ip", "", "127.0.0.1\x00"]


@st.composite
def candidate_lines(draw: st.DrawFn) -> str:
    template = draw(st.sampled_from(CANDIDATE_TEMPLATES))
    text = template.format(
        f=draw(st.sampled_from(["1", "abc", "", "-1", "9" * 30])),
        c=draw(st.sampled_from(["1", "2", "0", "x", "99999999999"])),
        p=draw(st.sampled_from(["udp", "UDP", "tcp", "sctp", ""])),
        prio=draw(st.sampled_from(["2130706431", "0", "-5", "1e9", "x"])),
        host=draw(st.sampled_from(HOSTS)),
        port=draw(st.sampled_from(["9", "0", "65535", "70000", "-1", "p"])),
        t=draw(st.sampled_from(["host", "srflx", "relay", "prflx", "weird", ""])),
    )
    if draw(st.booleans()):
        text += draw(st.text(max_size=12))
    return text


def candidate_items(pc_ids: list[str]) -> st.SearchStrategy[Any]:
    item = st.fixed_dictionaries(
        {"candidate": candidate_lines() | st.text(max_size=40)},
        optional={
            "sdp_mid": st.none() | st.sampled_from(["0", "1", "2", "99"]) | st.text(max_size=4),
            "sdp_mline_index": st.none() | st.integers(-(2**40), 2**40),
        },
    )
    return st.fixed_dictionaries(
        {"pc_id": st.sampled_from(pc_ids) | st.text(max_size=30)},
        optional={"candidates": st.lists(item | json_values, max_size=6)},
    )


def shaped_bodies(pc_ids: list[str]) -> st.SearchStrategy[Any]:
    """JSON of random shapes, and objects made of the fields the routes know."""
    known = st.dictionaries(
        st.sampled_from(BODY_FIELDS),
        json_values | st.sampled_from(["offer", "answer", "v=0", *pc_ids]) | candidate_lines(),
        max_size=6,
    )
    return json_values | known | candidate_items(pc_ids)


# Stand-ins for the ids of a test's live session and /start id, which strategies built once
# cannot know: the test replaces them (App.bind).
LIVE, START = "@live-pc-id", "@start-id"
BODIES = shaped_bodies([LIVE, START, "nope"])
SESSION_IDS = st.sampled_from([START, "x"]) | st.text("abc-_%.", max_size=8)
PC_IDS = st.sampled_from(["nope", LIVE]) | st.text("abc-_", min_size=1, max_size=8)

ROUTES = [
    ("POST", "/api/offer"), ("PATCH", "/api/offer"), ("POST", "/start"),
    ("POST", "/sessions/{sid}/api/offer"), ("PATCH", "/sessions/{sid}/api/offer"),
    ("GET", "/api/sessions"), ("GET", "/api/sessions/{pc}"), ("DELETE", "/api/sessions/{pc}"),
]  # fmt: skip
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
CONTENT_TYPES = [
    "application/json", "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", "application/json; charset=latin-1", "",
]  # fmt: skip


# -- SDP -----------------------------------------------------------------------------------

SDP_LINES = [
    "m=audio 9 UDP/TLS/RTP/SAVPF 111", "m=audio 0 RTP/AVP 0", "m=video 9 UDP/TLS/RTP/SAVPF 96",
    "m=application 9 UDP/DTLS/SCTP webrtc-datachannel", "a=rtpmap:111 opus/48000/2",
    "a=rtpmap:111 opus/0/0", "a=mid:0", "a=mid:", "a=group:BUNDLE 0 1 2 3 4",
    "a=group:BUNDLE", "c=IN IP6 ::1", "c=IN IP4", "a=fingerprint:sha-256 00:11",
    "a=fingerprint:md5 zz", "a=setup:active", "a=setup:nonsense", "a=ice-ufrag:", "a=ice-pwd:x",
    "a=sctp-port:abc", "a=sctp-port:-1", "a=max-message-size:-1", "a=ssrc:1 cname:x",
    "a=ssrc-group:FID 1", "a=extmap:99999 urn:x", "a=fmtp:111 minptime=abc", "a=rtcp:-1",
    "a=rtcp-fb:111", "a=sendonly", "a=inactive", "a=candidate:1 1 udp 1 127.0.0.1 9 typ host",
    "a=end-of-candidates", "a=", "=", "v=1", "o=", "t=x y",
]  # fmt: skip


SDP_LINE = st.sampled_from(SDP_LINES) | st.text(max_size=30)
SDP_NUMBER = st.integers(-(2**63), 2**64) | st.integers(0, 200)
SDP_EDITS = st.sampled_from(["delete", "duplicate", "replace", "insert", "number", "swap"])


@st.composite
def mutated_offers(draw: st.DrawFn, base: str) -> str:
    lines = base.split("\r\n")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(SDP_EDITS)
        if op == "delete" and len(lines) > 2:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "replace":
            lines[i] = draw(SDP_LINE)
        elif op == "insert":
            lines.insert(i, draw(SDP_LINE))
        elif op == "number":
            number = str(draw(SDP_NUMBER))
            lines[i] = re.sub(r"\d+", number, lines[i], count=1)
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    text = draw(st.sampled_from(["\r\n", "\n"])).join(lines)
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


@functools.cache
def offers(base: str) -> st.SearchStrategy[str]:
    """Mutations of ``base``, and random text behind a plausible start."""
    head = st.sampled_from(["v=0\r\nm=audio ", "v=0\nm=audio 9 x\n", ""])
    return mutated_offers(base) | st.builds(str.__add__, head, st.text(max_size=300))


# -- RTVI ----------------------------------------------------------------------------------

RTVI_TYPES = ["client-ready", "client-message", "send-text", "disconnect-bot"]
about = st.fixed_dictionaries(
    {"library": st.text(max_size=10) | json_values},
    optional={"library_version": json_values, "platform": json_values, "extra": json_values},
)
DATA_FOR_TYPE: dict[str, st.SearchStrategy[Any]] = {
    "client-ready": st.fixed_dictionaries(
        {},
        optional={
            "version": st.none()
            | st.sampled_from(["2.1.0", "1.0.0", "9.9.9", "", "2"])
            | st.text(max_size=8)
            | json_values,
            "about": about | json_values,
        },
    ),
    "client-message": st.fixed_dictionaries(
        {"t": st.sampled_from(["echo", "session-info", "nope"]) | json_values},
        optional={"d": json_values},
    ),
    "send-text": st.fixed_dictionaries(
        {"content": st.text(max_size=60) | json_values},
        optional={
            "options": json_values
            | st.fixed_dictionaries(
                {}, optional={"run_immediately": json_values, "audio_response": json_values}
            )
        },
    ),
    "disconnect-bot": json_values,
}


LABELS = st.just("rtvi-ai") | json_values
MESSAGE_IDS = st.text(min_size=1, max_size=8)
DROPPED_KEYS = st.lists(st.sampled_from(["label", "type", "id", "data"]), max_size=2, unique=True)


@st.composite
def rtvi_messages(draw: st.DrawFn, types: st.SearchStrategy[str]) -> dict[str, Any]:
    """Mostly well-framed envelopes of every client type, with fields gone or wrong."""
    type_ = draw(types)
    msg: dict[str, Any] = {
        "label": draw(LABELS),
        "type": type_ if draw(st.integers(0, 9)) else draw(json_values),
        "id": draw(MESSAGE_IDS if draw(st.integers(0, 9)) else json_values),
        "data": draw(DATA_FOR_TYPE.get(type_, json_values)),
    }
    for key in draw(DROPPED_KEYS):
        del msg[key]
    return msg


payloads = (
    rtvi_messages(st.sampled_from(RTVI_TYPES) | st.text(max_size=12)).map(json.dumps)
    | json_values.map(json.dumps)
    | st.text(max_size=80)
    | st.binary(max_size=80)
    | st.sampled_from(["ping: 1", "ping", '{"type": "signalling", "message": 5}', "\ud800"])
)

# For a real data channel: disconnect-bot would hang up (the in-process test covers it).
OVER_THE_WIRE = rtvi_messages(st.sampled_from(["client-ready", "client-message", "send-text"])).map(
    json.dumps
) | st.text(max_size=80)
