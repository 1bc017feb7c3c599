"""The voice through Opus, both ways: what the encoder and the decoder cost per 20 ms
frame and what is left of the voice, for the settings the server could use or ask for.

- The bot's voice: the modes, bitrates and complexities the outbound track could encode
  with (it encodes; the browser decodes).
- The caller's microphone, as a browser codes it for what our answer asks
  (``maxplaybackrate``, ``maxaveragebitrate``): the server decodes it, at 16 kHz.

Each voice (the embedded hibari voice, three sentences; espeak-ng in English, a female
English voice, German, Spanish and French) is encoded at 48 kHz mono in 20 ms frames
and decoded at 16 kHz, as the server decodes. Per setting: the encoder's and the
decoder's CPU (the best of three passes, µs a frame), the average packet size, and PESQ
wide-band (ITU-T P.862.2, 1 to 4.64, which hears up to 8 kHz) of the decoded voice
against the source at 16 kHz: its median and worst over the voices. PESQ needs the
``pesq`` package (``.venv/bin/pip install pesq``); without it only CPU and size print.

    .venv/bin/python -m bench.opus_voice [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import subprocess
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.audio.resampling import resample
from server.media.libopus import (
    APPLICATION_RESTRICTED_LOWDELAY,
    APPLICATION_VOIP,
    Decoder,
    Encoder,
)

RATE = 48000
FRAME = 960
HIBARI_TEXTS = (
    "Sure. The museum opens at nine in the morning and closes at six, except on Mondays.",
    "Tickets cost twelve dollars for adults; children under ten get in free.",
    "Would you like me to check whether there is a guided tour this afternoon?",
)
ESPEAK = {
    "espeak en-us": ("en-us", "Your order shipped on Tuesday and should arrive by Friday."),
    "espeak en female": ("en-us+f3", "I can move your appointment to a later time if you like."),
    "espeak de": ("de", "Ihre Bestellung wurde am Dienstag verschickt und kommt am Freitag."),
    "espeak es": ("es", "Su pedido salió el martes y debería llegar el viernes."),
    "espeak fr": ("fr", "Votre commande est partie mardi et devrait arriver vendredi."),
}
# (name, application, bitrate, complexity, coded up to Hz or None): the first of each is
# what was used before.
VOICE_SETTINGS = (
    ("hybrid 32k cx5 (VOIP)", APPLICATION_VOIP, 32000, 5, None),
    ("hybrid 32k cx3 (VOIP)", APPLICATION_VOIP, 32000, 3, None),
    ("CELT 64k cx5 (low delay)", APPLICATION_RESTRICTED_LOWDELAY, 64000, 5, None),
    ("CELT 64k cx8 (low delay)", APPLICATION_RESTRICTED_LOWDELAY, 64000, 8, None),
    ("CELT 64k cx5, to 12 kHz", APPLICATION_RESTRICTED_LOWDELAY, 64000, 5, 12000),
    ("CELT 64k cx8, to 12 kHz", APPLICATION_RESTRICTED_LOWDELAY, 64000, 8, 12000),
)
# A browser's microphone (libwebrtc: VOIP, complexity 5 on phones, 9 on desktops).
MICROPHONE_SETTINGS = (
    ("hybrid 32k (no maxplaybackrate)", APPLICATION_VOIP, 32000, 5, None),
    ("SILK 20k (maxplaybackrate=16000)", APPLICATION_VOIP, 20000, 5, 8000),
    ("SILK 32k (+ maxaveragebitrate=32000)", APPLICATION_VOIP, 32000, 5, 8000),
)


def voices() -> dict[str, tuple[np.ndarray, int]]:
    """Each voice as int16 at its own rate (hibari 24 kHz, espeak-ng 22.05 kHz)."""
    out: dict[str, tuple[np.ndarray, int]] = {}
    try:
        from hibari import Hibari

        from pipeline.services.embedded import HIBARI

        tts = Hibari(voice="heart", model=str(HIBARI.locate()), threads=1)
        for i, text in enumerate(HIBARI_TEXTS):
            audio = np.concatenate(list(tts.stream(text, seed=7)))
            audio = audio / np.max(np.abs(audio)) * 0.7
            out[f"hibari {i + 1}"] = ((audio * 32767).astype(np.int16), tts.sample_rate)
    except Exception as exc:  # the embedded voice is not installed: espeak-ng alone
        print(f"hibari skipped: {exc}")
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise SystemExit("espeak-ng is missing: apt-get install espeak-ng")
    for name, (voice, text) in ESPEAK.items():
        wav = subprocess.run([binary, "-v", voice, "--stdout", text], check=True,
                             capture_output=True).stdout  # fmt: skip
        with wave.open(io.BytesIO(wav)) as src:
            samples = np.frombuffer(src.readframes(src.getnframes()), np.int16)
            out[name] = (samples, src.getframerate())
    return out


def _aligned(decoded: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decoded audio moved back by the codec's delay (found by cross-correlation)."""
    n = min(decoded.size, reference.size)
    a, b = decoded[:n].astype(np.float64), reference[:n].astype(np.float64)
    spectrum = np.fft.rfft(a, 2 * n) * np.conj(np.fft.rfft(b, 2 * n))
    lag = int(np.argmax(np.fft.irfft(spectrum)[:1600]))  # up to 100 ms
    return decoded[lag:n], reference[: n - lag]


def measure(
    application: int, bitrate: int, complexity: int, band_hz: int | None, pcm: np.ndarray
) -> dict[str, Any]:
    frames = [pcm[i : i + FRAME].tobytes() for i in range(0, pcm.size - FRAME + 1, FRAME)]
    encode = decode = float("inf")
    packets: list[bytes] = []
    decoded = np.zeros(0, np.int16)
    for _ in range(3):
        encoder = Encoder(RATE, bitrate, complexity, application)
        if band_hz is not None:
            encoder.limit_bandwidth(band_hz)
        started = time.process_time()
        packets = [encoder.encode(frame) for frame in frames]
        encode = min(encode, (time.process_time() - started) / len(frames))
        decoder = Decoder(16000)
        started = time.process_time()
        pcm16 = [decoder.decode(p) for p in packets]
        decode = min(decode, (time.process_time() - started) / len(frames))
        decoded = np.frombuffer(b"".join(pcm16), np.int16)
    return {
        "encode_us": encode * 1e6,
        "decode_us": decode * 1e6,
        "bytes_per_packet": sum(map(len, packets)) / len(packets),
        "celt_share": sum(p[0] >> 3 >= 16 for p in packets) / len(packets),
        "decoded": decoded,
    }


def table(
    title: str, settings: tuple[tuple[str, int, int, int, int | None], ...],
    sources: dict[str, tuple[np.ndarray, int]], pesq: Any,
) -> list[dict[str, Any]]:  # fmt: skip
    rows: list[dict[str, Any]] = []
    for name, application, bitrate, complexity, band_hz in settings:
        results, scores = [], []
        for samples, rate in sources.values():
            pcm = resample(samples, rate, RATE).astype(np.int16)
            result = measure(application, bitrate, complexity, band_hz, pcm)
            results.append(result)
            if pesq is not None:
                reference = resample(samples, rate, 16000).astype(np.int16)
                decoded, ref = _aligned(result["decoded"], reference)
                scores.append(float(pesq(16000, ref, decoded, "wb")))
        rows.append({
            "setting": name,
            "encode_us_median": statistics.median(r["encode_us"] for r in results),
            "decode_us_median": statistics.median(r["decode_us"] for r in results),
            "bytes_per_packet": statistics.mean(r["bytes_per_packet"] for r in results),
            "celt_share": statistics.mean(r["celt_share"] for r in results),
            "pesq_wb_median": statistics.median(scores) if scores else None,
            "pesq_wb_worst": min(scores) if scores else None,
        })  # fmt: skip
    print(f"\n{title}\n")
    print("| setting | encode µs / 20 ms | decode µs (16 kHz) | bytes / packet | CELT frames"
          " | PESQ-WB median | worst |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        q = r["pesq_wb_median"]
        quality = f"{q:.2f} | {r['pesq_wb_worst']:.2f}" if q is not None else "- | -"
        print(f"| {r['setting']} | {r['encode_us_median']:.0f} | {r['decode_us_median']:.0f}"
              f" | {r['bytes_per_packet']:.0f} | {r['celt_share']:.0%} | {quality} |")  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        from pesq import pesq
    except ImportError:
        pesq = None
        print("pesq is not installed (.venv/bin/pip install pesq): CPU and size only")
    sources = voices()
    print(f"\n{len(sources)} voices: {', '.join(sources)}")
    voice = table("The bot's voice", VOICE_SETTINGS, sources, pesq)
    microphone = table("The caller's microphone", MICROPHONE_SETTINGS, sources, pesq)
    if args.json:
        report = {"voices": list(sources), "voice": voice, "microphone": microphone}
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
