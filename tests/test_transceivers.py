"""server.media.transceivers: the Opus format parameters of an offer or an answer."""

from __future__ import annotations

from server.media.transceivers import opus_parameter

CAP = "maxaveragebitrate"

CHROME = (
    "m=audio 9 UDP/TLS/RTP/SAVPF 111 63 0\r\n"
    "a=rtpmap:111 opus/48000/2\r\n"
    "a=rtcp-fb:111 transport-cc\r\n"
    "a=fmtp:111 minptime=10;useinbandfec=1\r\n"
    "a=rtpmap:63 red/48000/2\r\n"
    "a=fmtp:63 111/111\r\n"
    "a=rtpmap:0 PCMU/8000\r\n"
)


def test_an_offer_without_a_cap_sets_none() -> None:
    assert opus_parameter(CHROME, CAP) is None
    assert opus_parameter("", CAP) is None


def test_the_cap_is_read_from_the_opus_format_only() -> None:
    capped = CHROME.replace("minptime=10;", "minptime=10; maxaveragebitrate=20000;")
    assert opus_parameter(capped, CAP) == 20000
    # On another format it caps nothing.
    assert opus_parameter(CHROME.replace("63 111/111", "63 maxaveragebitrate=8000"), CAP) is None


def test_the_lowest_of_two_opus_formats_wins_and_nonsense_is_ignored() -> None:
    two = (
        "a=rtpmap:109 OPUS/48000/2\r\na=fmtp:109 maxaveragebitrate=40000\r\n"
        "a=rtpmap:111 opus/48000/2\r\na=fmtp:111 maxaveragebitrate=30000\r\n"
    )
    assert opus_parameter(two, CAP) == 30000
    assert opus_parameter(two.replace("30000", "abc").replace("40000", "99999999"), CAP) is None


def test_other_parameters_are_read_by_name() -> None:
    answer = CHROME.replace("minptime=10;useinbandfec=1", "useinbandfec=1;maxplaybackrate=16000")
    assert opus_parameter(answer, "maxplaybackrate") == 16000
    assert opus_parameter(answer, "playbackrate") is None  # a whole name, not a tail
