"""The short-window whisper decoder on the real tiny.en and generated speech
(``testkit/stt_sentences.py``): it hears a sentence as the 30 s path does, keeps the
no-speech rule (silence and noise give ""), forces a prefix, and refuses a language
tiny.en cannot speak."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pipeline.services.embedded import EmbeddedModels
from pipeline.services.local_stt import (
    SHORT_WINDOW_DECODING,
    TUNED_30S_DECODING,
    LocalSTT,
    to_whisper_input,
    transcribe_utterance,
)
from pipeline.services.whisper_decoder import UnsupportedLanguage, WhisperDecoder, window_frames
from testkit.stt_sentences import SENTENCES, utterance
from testkit.wer import normalise, word_errors


def test_the_window_is_the_length_plus_a_margin_rounded_up_to_a_step() -> None:
    step_margin_min = (2.0, 1.0, 4.0)
    assert window_frames(16000, step_margin_min) == 400  # 1 s: the minimum, 4 s
    assert window_frames(round(3.2 * 16000), step_margin_min) == 600  # 4.2 s -> 6 s
    assert window_frames(5 * 16000, step_margin_min) == 600  # exactly 6 s
    assert window_frames(40 * 16000, step_margin_min) == 3000  # never past whisper's 30 s
    assert window_frames(16000, None) == 3000


@pytest.fixture(scope="module")
def whisper() -> object:
    return asyncio.run(EmbeddedModels.shared().stt.get())


@pytest.mark.e2e
@pytest.mark.parametrize("sentence", [SENTENCES[0], SENTENCES[8], SENTENCES[12]])
def test_a_sentence_is_heard_as_the_30s_path_hears_it(whisper: object, sentence: str) -> None:
    pcm = utterance(sentence, "hibari")
    short, _ = transcribe_utterance(whisper, pcm, 16000, SHORT_WINDOW_DECODING)  # type: ignore[arg-type]
    full, _ = transcribe_utterance(whisper, pcm, 16000, TUNED_30S_DECODING)  # type: ignore[arg-type]
    assert word_errors(sentence, short)[0] <= 1, short
    assert word_errors(sentence, short)[0] <= word_errors(sentence, full)[0], (short, full)


@pytest.mark.e2e
@pytest.mark.parametrize("seconds", [0.5, 2.0, 4.0])
def test_silence_and_noise_give_no_text(whisper: object, seconds: float) -> None:
    decoder = WhisperDecoder(whisper)  # type: ignore[arg-type]
    size = round(seconds * 16000)
    assert decoder.decode(np.zeros(size, np.float32), SHORT_WINDOW_DECODING).text == ""
    for level in (0.003, 0.01, 0.05):
        noise = np.random.default_rng(size).normal(0, level, size).astype(np.float32)
        assert decoder.decode(noise, SHORT_WINDOW_DECODING).text == "", (seconds, level)


@pytest.mark.e2e
def test_a_prefix_is_forced_and_only_the_rest_is_generated(whisper: object) -> None:
    decoder = WhisperDecoder(whisper)  # type: ignore[arg-type]
    sentence = SENTENCES[3]  # "Please call Maria and tell her I will be twenty minutes late."
    audio = to_whisper_input(utterance(sentence, "hibari"), 16000)
    decoded = decoder.decode(audio, SHORT_WINDOW_DECODING, prefix="Please call Maria and")
    assert decoded.text.startswith("Please call Maria and ")
    assert normalise(decoded.text) == normalise(sentence), decoded.text


@pytest.mark.e2e
def test_an_english_only_model_refuses_another_language() -> None:
    tiny = EmbeddedModels(stt="whisper-tiny.en")
    with pytest.raises(UnsupportedLanguage, match="English-only"):
        LocalSTT(tiny, language="fr")
    whisper = asyncio.run(tiny.stt.get())
    with pytest.raises(UnsupportedLanguage, match="English-only"):
        WhisperDecoder(whisper, "fr")
    tiny.shutdown()
