"""The near-end gate: while the echo path is unknown, frames that sound like the bot's echo
go through AEC3 and the user's voice passes as it came. Generated speech (hibari for the
bot, espeak for the user), the echo made as a loudspeaker would: delayed and attenuated."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.audio.echo_envelopes import BLOCK, History
from pipeline.audio.near_end import NearEndGate
from testkit.turn_clips import RATE, render

FRAME = 320


@pytest.fixture(scope="module")
def bot() -> np.ndarray:
    return render(
        "Hello! How can I help you today? I can book tables and answer questions.", "hibari"
    )


@pytest.fixture(scope="module")
def user() -> np.ndarray:
    return render("Can you tell me what the answer is?", "espeak")


def noise(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 20, n)


def judged(mic: np.ndarray, played: np.ndarray, frame: int = FRAME) -> list[tuple[int, bool]]:
    """(first sample, echo-like) of each frame louder than the gate."""
    gate = NearEndGate()
    out = []
    for i in range(0, mic.size - frame + 1, frame):
        gate.push(mic[i : i + frame], played[i : i + frame])
        like = gate.echo_like()
        if gate.loud:
            out.append((i, like))
    return out


def as_int16(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -32768, 32767).astype(np.int16)


@pytest.mark.parametrize(("gain_db", "delay"), [(-20, 0.15), (-10, 0.15), (-3, 0.25)])
def test_the_bots_echo_is_judged_an_echo(bot: np.ndarray, gain_db: float, delay: float) -> None:
    lead = RATE // 2  # the call began before the bot spoke
    played = np.zeros(lead + bot.size + RATE, np.int16)
    played[lead : lead + bot.size] = bot
    mic = noise(played.size)
    d = lead + round(delay * RATE)
    mic[d : d + bot.size] += bot[: mic.size - d] * 10 ** (gain_db / 20)
    frames = judged(as_int16(mic), played)
    assert len(frames) > 50  # the echo is loud enough to be judged
    assert [i for i, like in frames if not like] == []


def test_the_users_voice_over_a_bot_that_does_not_come_back_passes(
    bot: np.ndarray, user: np.ndarray
) -> None:
    lead = RATE // 2
    played = np.zeros(lead + bot.size + RATE, np.int16)
    played[lead : lead + bot.size] = bot
    mic = noise(played.size)
    mic[lead - RATE // 10 : lead - RATE // 10 + user.size] += user  # a moment before the bot
    frames = judged(as_int16(mic), played)
    passed = [i for i, like in frames if not like]
    assert len(passed) >= 0.9 * len(frames)


def test_nothing_played_nothing_is_an_echo(user: np.ndarray) -> None:
    mic = as_int16(noise(user.size + RATE) + np.pad(user, (RATE // 2, RATE // 2)))
    frames = judged(mic, np.zeros(mic.size, np.int16))
    assert frames and not any(like for _, like in frames)


def test_quiet_frames_are_not_judged() -> None:
    gate = NearEndGate()
    rng = np.random.default_rng(1)
    for _ in range(50):
        gate.push(rng.normal(0, 20, FRAME).astype(np.int16), np.zeros(FRAME, np.int16))
        assert gate.echo_like()  # under the VAD's volume gate: nothing lost by cancelling
    assert gate.last_peak == 0.0  # and no correlation was computed


def test_frames_of_any_length_make_the_same_envelope(bot: np.ndarray) -> None:
    whole, odd = NearEndGate(), NearEndGate()
    mic = bot[: 50 * BLOCK]
    for i in range(0, mic.size, 2 * BLOCK):
        whole.push(mic[i : i + 2 * BLOCK], None)
    for i in range(0, mic.size, 333):  # as the transport's decoder cuts them
        odd.push(mic[i : i + 333], None)
    assert np.allclose(whole._heard.last()[-20:], odd._heard.last()[-20:])


def test_the_history_is_the_last_values_in_order() -> None:
    history = History(5, before=-90.0)
    assert history.last().tolist() == [-90.0] * 5
    for n in range(30):  # past the buffer's end: compacted on the way
        history.extend(np.array([float(n), float(n) + 0.5]))
    assert history.last().tolist() == [27.5, 28.0, 28.5, 29.0, 29.5]
    first = History(3, before=None)
    first.extend(np.array([-60.0]))
    assert first.last().tolist() == [-60.0, -60.0, -60.0]  # the room's level, no onset
