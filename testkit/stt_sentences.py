"""The speech-to-text evaluation set: 60 generated sentences in two voices, with numbers and
names, as the transcriber would hand them to the STT.

Sentences are written as they are said (numbers in words), so the TTS reads exactly the
reference; :mod:`testkit.wer` normalises whisper's digits back to words. Voices are those
of :mod:`testkit.turn_clips`: ``espeak`` (espeak-ng en-us) and ``hibari`` (the embedded
neural voice), 16 kHz int16, trimmed to their sound. Renderings are cached as ``.npy``
files in a temporary folder (``PARLEY_STT_EVAL_CACHE`` overrides it), keyed by voice and
text, so a second run renders nothing.

:func:`utterance` then frames the speech as :class:`pipeline.hearing.transcriber.Transcriber`
sends it: its pre-roll (0.3 s) before the onset, and after the end its tail (0.15 s)
plus, when the frames' clock drifted, the VAD's whole stop window; a faint noise floor
(about -66 dBFS, seeded) stands in for a microphone's, since whisper hears digital
silence and room noise differently.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

from testkit.turn_clips import RATE, render

VOICES = ("espeak", "hibari")

PARIS = "What is the weather usually like in Paris in spring?"

SENTENCES = (
    PARIS,
    "Can you book a table for four people at seven thirty tonight?",
    "My flight to Tokyo leaves at six fifteen in the morning.",
    "Please call Maria and tell her I will be twenty minutes late.",
    "How many kilometers is it from Berlin to Munich?",
    "Set an alarm for five forty five tomorrow.",
    "The meeting with Mister Johnson has moved to Thursday.",
    "I need three tickets for the concert on the twelfth of March.",
    "What is the population of Canada?",
    "Send a message to David saying I am on my way.",
    "The package should arrive in two or three days.",
    "Remind me to pay the rent on the first of every month.",
    "How much is a coffee and a croissant?",
    "Turn the thermostat up to twenty two degrees.",
    "Who won the World Cup in nineteen ninety eight?",
    "Add eggs, milk and bread to my shopping list.",
    "My phone battery is at fifteen percent.",
    "Can you play some jazz music in the living room?",
    "The train from Chicago is running forty minutes late.",
    "I would like to transfer two hundred dollars to Sarah.",
    "What time does the pharmacy on Main Street close?",
    "Translate good morning into Spanish.",
    "Emma and Oliver are coming for dinner on Saturday.",
    "How long does it take to boil an egg?",
    "Book a taxi to the airport for half past eight.",
    "The password has eight letters and two numbers.",
    "Is it going to rain in London this weekend?",
    "Cancel my appointment with Doctor Patel on Monday.",
    "How tall is the Eiffel Tower?",
    "My daughter turns eleven next week.",
    "Find me a cheap hotel near the beach in Barcelona.",
    "We need about fifty chairs for the wedding.",
    "Read me the latest news about the election.",
    "The recipe needs two cups of flour and one egg.",
    "Call the office and say I am working from home today.",
    "What is three hundred divided by twelve?",
    "Tell Peter that the report is ready.",
    "I parked the car on the third floor.",
    "How do I get to the museum from the station?",
    "The bus number forty two stops right outside.",
    "Can you recommend a good book about history?",
    "Our team scored ninety points in the last game.",
    "Lisa was born in two thousand five.",
    "Please open the garage door.",
    "What is the exchange rate between euros and dollars?",
    "The store is open from nine to five on weekdays.",
    "Schedule a call with Ahmed and Julia at two o'clock.",
    "I ran ten kilometers in fifty eight minutes.",
    "Where is the nearest gas station?",
    "Water the plants in the garden every evening.",
    "The hotel room costs one hundred twenty dollars a night.",
    "Do I need an umbrella in Seattle today?",
    "My brother Michael lives in New York.",
    "How many days are there until Christmas?",
    "Order a large pizza with mushrooms and olives.",
    "The temperature dropped to minus five last night.",
    "Can you spell the name Catherine for me?",
    "Show me photos from our trip to Italy.",
    "The library closes at eight thirty on Fridays.",
    "What did I have on my calendar for the fourth of July?",
)

PRE_ROLL_SECS = 0.3  # Transcriber.pre_roll_secs
TAIL_SECS = 0.15  # Transcriber.tail_secs
_NOISE_RMS = 16.0  # int16 units: about -66 dBFS


def cache_dir() -> Path:
    folder = os.environ.get("PARLEY_STT_EVAL_CACHE")
    path = Path(folder) if folder else Path(tempfile.gettempdir()) / "parley-stt-eval"
    path.mkdir(parents=True, exist_ok=True)
    return path


def speech(text: str, voice: str) -> np.ndarray:
    """``text`` spoken by ``voice`` (16 kHz int16, trimmed), rendered once and cached."""
    key = hashlib.sha256(f"{voice}\n{text}".encode()).hexdigest()[:20]
    path = cache_dir() / f"{voice}-{key}.npy"
    if path.is_file():
        return np.load(path)
    audio = render(text, voice)
    partial = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(partial, audio)
    partial.replace(path)  # atomic: a concurrent reader never sees half a file
    return audio


def utterance(text: str, voice: str, after: float = TAIL_SECS) -> np.ndarray:
    """The speech as the transcriber sends it: pre-roll, speech, ``after`` seconds of
    trailing sound, all over a faint seeded noise floor."""
    audio = speech(text, voice).astype(np.float32)
    lead, tail = round(PRE_ROLL_SECS * RATE), round(after * RATE)
    framed = np.zeros(lead + audio.size + tail, np.float32)
    framed[lead : lead + audio.size] = audio
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    framed += np.random.default_rng(seed).normal(0.0, _NOISE_RMS, framed.size)
    return np.clip(np.round(framed), -32768, 32767).astype(np.int16)
