"""What the embedded whisper tiny.en hears: its decoding guards on their own, and the real
model on generated speech (``testkit/stt_sentences.py``; renderings cached in a temporary
folder). The figures for the whole set come from ``bench/stt_wer.py``; these tests hold
the behaviour: no loop on the sentence that looped, and a word error rate on a subset
that the old decoding does not reach.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pipeline.services.embedded import EmbeddedModels
from pipeline.services.local_stt import (
    BASELINE_DECODING,
    DEFAULT_DECODING,
    Decoding,
    LocalSTT,
    collapse_repeats,
    find_repeat,
    transcribe_utterance,
    trim_trailing,
)
from testkit.stt_sentences import PARIS, SENTENCES, utterance
from testkit.wer import normalise, wer

# -- guards, without the model --------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "What is the weather usually like in Paris in Paris in Paris?",
        "like in Paris, in Paris?",
        "the the the the end",
    ],
)
def test_a_loop_is_found_and_cut_to_one_copy(text: str) -> None:
    assert find_repeat(text) is not None
    collapsed = collapse_repeats(text)
    assert find_repeat(collapsed) is None
    words = normalise(collapsed)
    assert words.count("paris") <= 1 and words.count("the") <= 1, collapsed


@pytest.mark.parametrize(
    "text",
    [
        "I'll be in the office in the morning and in the evening.",
        "No no no, that's wrong.",
        "It was very very good.",
        "Bye bye.",
    ],
)
def test_ordinary_repeats_are_not_loops(text: str) -> None:
    assert find_repeat(text) is None
    assert collapse_repeats(text) == text


def test_trailing_silence_is_trimmed_to_the_margin_and_the_start_is_kept() -> None:
    rate = 16000
    rng = np.random.default_rng(1)
    floor = rng.normal(0, 0.0005, 3 * rate).astype(np.float32)  # about -66 dBFS
    audio = floor.copy()
    audio[rate // 2 : rate] += rng.normal(0, 0.1, rate // 2).astype(np.float32)  # 0.5-1.0 s
    trimmed = trim_trailing(audio, 0.3)
    assert trimmed.size / rate == pytest.approx(1.3, abs=0.011)
    assert np.array_equal(trimmed, audio[: trimmed.size])
    # Nothing but the floor: nothing to trim against, the clip stays whole.
    assert trim_trailing(floor, 0.3).size == floor.size


def test_wer_compares_numbers_as_spoken_words() -> None:
    assert normalise("Set an alarm for 5:45 on the 12th of March, $20.") == normalise(
        "Set an alarm for five forty-five on the twelfth of March, twenty dollars."
    )
    assert wer([("Book a table for four", "Book a table for 4."), ("in spring", "in Paris")]) == (
        pytest.approx(1 / 7)
    )


# -- the real model -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models() -> EmbeddedModels:
    # The figures below are tiny.en's, whatever the registry's default model is.
    tiny = EmbeddedModels(stt="whisper-tiny.en")
    asyncio.run(tiny.stt.get())
    return tiny


@pytest.mark.e2e
async def test_the_paris_question_is_heard_without_a_loop(models: EmbeddedModels) -> None:
    # Tiny.en heard this espeak sentence as "...like in Paris in Paris in Paris?".
    transcript = await LocalSTT(models).transcribe(utterance(PARIS, "espeak"))
    assert find_repeat(transcript.text) is None, transcript.text
    words = normalise(transcript.text)
    assert words[: len(words) - 2] == normalise(PARIS)[: len(words) - 2], transcript.text
    assert words.count("paris") == 1, transcript.text


# Every sixth sentence: ten spread over the set, the Paris question first. Measured here,
# espeak: the old decoding 29.8 % (30 errors in 101 words), the tuned one 16.7 %; both are
# deterministic on it. The bound sits between, with room for a different CPU's rounding.
SUBSET = SENTENCES[::6]
SUBSET_WER_BOUND = 0.22


def subset_wer(models: EmbeddedModels, voice: str, decoding: Decoding = DEFAULT_DECODING) -> float:
    whisper = asyncio.run(models.stt.get())
    pairs = [
        (s, transcribe_utterance(whisper, utterance(s, voice), 16000, decoding)[0]) for s in SUBSET
    ]
    return wer(pairs)


@pytest.mark.e2e
def test_word_error_rate_on_espeak_subset_stays_under_the_bound(models: EmbeddedModels) -> None:
    assert subset_wer(models, "espeak") < SUBSET_WER_BOUND


@pytest.mark.e2e
def test_old_decoding_is_past_the_bound_on_the_same_subset(models: EmbeddedModels) -> None:
    # The bound means something only if the decoding before the tuning misses it.
    assert subset_wer(models, "espeak", BASELINE_DECODING) >= SUBSET_WER_BOUND


@pytest.mark.e2e
def test_neural_voice_subset_is_nearly_exact(models: EmbeddedModels) -> None:
    assert subset_wer(models, "hibari") <= 0.03


def test_token_cap_follows_the_utterance_and_stays_within_whisper_context() -> None:
    short = DEFAULT_DECODING.options(2.0)["max_new_tokens"]
    assert 40 <= short <= 60  # far more than 2 s of speech holds, far less than a loop
    assert DEFAULT_DECODING.options(600.0)["max_new_tokens"] <= 440  # 448 minus the prompt
    assert "max_new_tokens" not in BASELINE_DECODING.options(2.0)
