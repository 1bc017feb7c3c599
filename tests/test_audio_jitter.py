"""The inbound audio jitter buffer: each packet on as it comes, gaps skipped, nothing stuck."""

from __future__ import annotations

import pytest
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtp import RtpPacket

from server.media.audio_jitter import MAX_GAP, AudioJitter


def packet(seq: int) -> RtpPacket:
    p = RtpPacket(payload_type=111, sequence_number=seq % 0x10000, timestamp=seq * 960)
    p._data = seq.to_bytes(4, "big")  # type: ignore[attr-defined]  # set by depayload
    return p


def released(jitter: AudioJitter | JitterBuffer, seq: int) -> list[tuple[int, int]]:
    """(packet number, lost before it) for what adding packet ``seq`` hands on."""
    _, frame = jitter.add(packet(seq))
    if frame is None:
        return []
    if isinstance(jitter, JitterBuffer):
        return [(int.from_bytes(frame.data, "big"), 0)]
    return [(int.from_bytes(data, "big"), lost) for data, lost in frame.packets]


def lag_after_one_loss(jitter: AudioJitter | JitterBuffer) -> list[int]:
    """For each packet of a 20 ms stream that lost packet 10: how many packets later than
    its own arrival it was handed on."""
    handed: dict[int, int] = {}
    for seq in range(200):
        if seq != 10:
            for number, _ in released(jitter, seq):
                handed[number] = seq
    return [handed[n] - n for n in sorted(handed)]


def test_aiortcs_buffer_lags_a_packet_always_and_fourteen_after_one_loss() -> None:
    # Why it is replaced: what aiortc 1.16's buffer does with the receiver's settings.
    lags = lag_after_one_loss(JitterBuffer(capacity=16, prefetch=1))
    assert set(lags[:9]) == {1}  # each packet waits for the next one: 20 ms
    assert set(lags[-100:]) == {14}  # and after one loss, 280 ms for good


def test_each_packet_is_handed_on_as_it_arrives_and_a_loss_costs_nothing_after() -> None:
    jitter = AudioJitter()
    assert set(lag_after_one_loss(jitter)) == {0}
    assert jitter.lost == 1 and jitter.late == 0


def test_the_packet_after_a_gap_says_how_many_were_lost() -> None:
    jitter = AudioJitter()
    assert released(jitter, 5) == [(5, 0)]
    assert released(jitter, 6) == [(6, 0)]
    assert released(jitter, 9) == [(9, 2)]
    assert released(jitter, 10) == [(10, 0)]
    assert jitter.lost == 2


def test_late_and_duplicate_packets_are_dropped_and_counted() -> None:
    jitter = AudioJitter()
    for seq in (1, 2, 4):
        released(jitter, seq)
    assert released(jitter, 3) == []  # it was given up for lost when 4 came
    assert released(jitter, 4) == []  # a duplicate
    assert released(jitter, 5) == [(5, 0)]
    assert (jitter.lost, jitter.late) == (1, 2)


def test_with_hold_a_reordered_packet_is_waited_for_and_both_go_on_in_order() -> None:
    jitter = AudioJitter(hold=1)
    assert released(jitter, 1) == [(1, 0)]
    assert released(jitter, 3) == []  # 2 may only be late
    assert released(jitter, 2) == [(2, 0), (3, 0)]
    assert released(jitter, 4) == [(4, 0)]
    assert (jitter.lost, jitter.late) == (0, 0)


def test_with_hold_a_gap_is_given_up_after_hold_packets() -> None:
    jitter = AudioJitter(hold=2)
    released(jitter, 1)
    assert released(jitter, 3) == [] and released(jitter, 4) == []
    assert released(jitter, 5) == [(3, 1), (4, 0), (5, 0)]
    assert released(jitter, 2) == []  # too late now
    assert (jitter.lost, jitter.late) == (1, 1)


@pytest.mark.parametrize("hold", [0, 3])
def test_the_sequence_wraps_around(hold: int) -> None:
    jitter = AudioJitter(hold=hold)
    out = [n for seq in range(0xFFF0, 0x10010) for n, _ in released(jitter, seq)]
    assert out == list(range(0xFFF0, 0x10010))


def test_a_jump_restarts_the_sequence_rather_than_counting_a_loss() -> None:
    jitter = AudioJitter()
    released(jitter, 100)
    far = 100 + MAX_GAP + 50
    assert released(jitter, far) == [(far, 0)]
    assert released(jitter, far + 1) == [(far + 1, 0)]
    assert jitter.lost == 0


def test_what_is_held_is_bounded_by_hold() -> None:
    jitter = AudioJitter(hold=3)
    released(jitter, 0)
    for seq in range(2, 60):  # packet 1 never comes
        released(jitter, seq)
        assert len(jitter._held) <= 3
    assert jitter.lost == 1


def test_a_packet_dropped_over_the_budget_is_skipped_not_lost() -> None:
    jitter = AudioJitter()
    released(jitter, 1)
    jitter.skip(packet(2))  # the session's packet gate dropped it
    assert released(jitter, 3) == [(3, 0)]
    assert jitter.lost == 0
