"""Sample-rate conversion: streamed, whole clips, the echo reference's decimator and the
noise suppressor's interpolator."""

from __future__ import annotations

import av
import numpy as np

from pipeline.audio.resampling import Decimator, Interpolator, StreamResampler, resample


def tone(freq: float, rate: int, seconds: float = 1.0, peak: float = 10000) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (peak * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def dominant_freq(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64)))
    return float(np.argmax(spectrum)) * rate / samples.size


def rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2)))


def test_a_stream_in_chunks_equals_the_whole_clip_with_no_seam() -> None:
    clip = tone(440, 24000)
    resampler = StreamResampler(48000)
    chunks = [resampler.resample(clip[i : i + 480], 24000) for i in range(0, clip.size, 480)]
    streamed = np.frombuffer(b"".join(chunks), np.int16)
    whole = resample(clip, 24000, 48000)
    assert whole.size == 2 * clip.size
    # A few samples stay held back until more come; all that came out matches exactly.
    assert whole.size - 64 < streamed.size <= whole.size
    assert np.array_equal(streamed, whole[: streamed.size])
    assert abs(dominant_freq(streamed, 48000) - 440) < 2


def test_same_rate_and_empty_input_pass_through() -> None:
    resampler = StreamResampler(48000)
    pcm = tone(440, 48000, 0.02)
    assert resampler.resample(pcm, 48000) == pcm.tobytes()
    assert resampler.resample(pcm.tobytes(), 48000) == pcm.tobytes()
    assert resampler.resample(b"", 24000) == b""


def test_each_input_rate_keeps_its_own_state_until_reset() -> None:
    resampler = StreamResampler(48000)
    first = resampler.resample(tone(440, 24000, 0.02), 24000)
    assert len(first) < 2 * 2 * 480  # some samples are held for the next chunk
    resampler.reset()  # e.g. a flush at barge-in: the held tail is dropped
    silence = np.zeros(480, np.int16)
    after = np.frombuffer(resampler.resample(silence, 24000), np.int16)
    assert not after.any(), "nothing of the tone before the reset came out after it"
    other = resampler.resample(tone(440, 16000, 0.02), 16000)
    assert len(other) > 0


def test_decoded_frames_come_out_as_s16_chunks_at_the_rate() -> None:
    clip = tone(1000, 48000, 0.2)
    resampler = StreamResampler(16000)
    out = b""
    for i in range(0, clip.size, 960):
        frame = av.AudioFrame.from_ndarray(
            clip[i : i + 960].reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = 48000
        chunks = resampler.resample_frame(frame)
        assert all(isinstance(c, bytes) and c for c in chunks)
        out += b"".join(chunks)
    samples = np.frombuffer(out, np.int16)
    assert clip.size // 3 - 64 < samples.size <= clip.size // 3
    assert abs(dominant_freq(samples, 16000) - 1000) < 10


def test_a_whole_clip_keeps_its_type_and_pitch() -> None:
    clip = tone(440, 22050)
    pcm = resample(np.frombuffer(clip.tobytes(), np.int16), 22050, 16000)  # read-only input
    assert pcm.dtype == np.int16 and pcm.size == 16000
    assert abs(dominant_freq(pcm, 16000) - 440) < 2
    floats = resample(clip.astype(np.float32) / 32768, 48000, 16000)
    assert floats.dtype == np.float32 and abs(floats.size - clip.size / 3) <= 1
    assert np.array_equal(resample(clip, 16000, 16000), clip)


def test_the_decimator_keeps_speech_and_stops_what_would_alias() -> None:
    voice, alias = tone(1000, 48000), tone(12000, 48000)
    assert abs(rms(Decimator(3)(voice)[100:]) - rms(voice)) < 0.05 * rms(voice)
    assert rms(Decimator(3)(alias)[100:]) < 0.03 * rms(alias)  # ~-30 dB or better


def test_the_decimator_streams_without_seams() -> None:
    clip = tone(1000, 48000)
    streamed = Decimator(3)
    parts = [streamed(clip[i : i + 700]) for i in range(0, clip.size, 700)]
    assert np.array_equal(np.concatenate(parts), Decimator(3)(clip))


def test_the_interpolator_keeps_the_tone_and_stops_the_images() -> None:
    clip = tone(1000, 16000)
    up = Interpolator(3)(clip)
    assert up.dtype == np.float32 and up.size == 3 * clip.size
    assert abs(rms(up[200:]) - rms(clip)) < 0.05 * rms(clip)
    assert abs(dominant_freq(up, 48000) - 1000) < 2
    spectrum = np.abs(np.fft.rfft(up[200:].astype(np.float64)))
    freqs = np.fft.rfftfreq(up.size - 200, 1 / 48000)
    image = spectrum[(freqs > 14000) & (freqs < 16000)].max()  # 16 kHz - 1 kHz
    assert image < 0.01 * spectrum.max()  # -40 dB or better


def test_the_interpolator_streams_without_seams_and_with_a_fixed_delay() -> None:
    clip = tone(440, 16000)
    streamed = Interpolator(3)
    parts = [streamed(clip[i : i + 333]) for i in range(0, clip.size, 333)]
    assert np.array_equal(np.concatenate(parts), Interpolator(3)(clip))
    impulse = np.zeros(64, np.int16)
    impulse[10] = 10000
    assert int(np.argmax(Interpolator(3, taps=48)(impulse))) in (30 + 23, 30 + 24)
