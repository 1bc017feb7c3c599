"""The Smart Turn v3.2 model on its real weights: the file check, the features and what it
says of generated speech."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.hearing.smart_turn import (
    MODEL_BYTES,
    MODEL_PATH,
    WINDOW,
    SmartTurnModel,
    find_smart_turn_model,
)
from pipeline.services.model_files import ModelFileError
from testkit.turn_clips import RATE, render


@pytest.fixture(scope="module")
def model() -> SmartTurnModel:
    return SmartTurnModel()


def test_the_pinned_file_is_found_without_importing_pipecat() -> None:
    path = find_smart_turn_model()
    assert path.name == "smart-turn-v3.2-cpu.onnx" and path.stat().st_size == MODEL_BYTES
    assert "pipecat" not in sys.modules


def test_a_missing_or_different_file_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(
        ModelFileError,
        match=r"missing; reinstall with `pip install --no-deps pipecat-ai==1\.14\.0 "
        r"--force-reinstall`",
    ):
        find_smart_turn_model(tmp_path)
    target = tmp_path / MODEL_PATH
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\0" * 100)
    with pytest.raises(ModelFileError, match=r"is 100 bytes, expected 8,679,182"):
        find_smart_turn_model(tmp_path)
    # The right size, other bytes: the hash catches it.
    shutil.copyfile(find_smart_turn_model(), target)
    with target.open("r+b") as f:
        f.seek(MODEL_BYTES // 2)
        f.write(b"\xff\xfe")
    with pytest.raises(ModelFileError, match="SHA-256"):
        find_smart_turn_model(tmp_path)


def test_features_are_the_last_8_s_left_padded(model: SmartTurnModel) -> None:
    tone = (3000 * np.sin(np.arange(3 * RATE) * 0.05)).astype(np.int16)
    short = model.features(tone)
    assert short.shape == (80, 800) and short.dtype == np.float32
    assert np.isfinite(short).all()
    # The padding is on the left: the first frames are alike (silence), the last are not.
    assert np.allclose(short[:, 10], short[:, 20]) and not np.allclose(short[:, 10], short[:, 790])
    # Longer than 8 s: only the last 8 s count.
    long = np.concatenate([np.full(5 * RATE, 9000, np.int16), np.zeros(WINDOW, np.int16)])
    assert np.array_equal(model.features(long), model.features(np.zeros(WINDOW, np.int16)))
    assert np.isfinite(model.features(np.zeros(10, np.int16))).all()  # silence: no NaN


def with_silence(audio: np.ndarray, seconds: float = 0.2) -> np.ndarray:
    return np.concatenate([audio, np.zeros(round(seconds * RATE), np.int16)])


@pytest.mark.parametrize(
    "text",
    ["What time does the museum open?", "Please turn off the lights in the kitchen."],
)
def test_a_complete_sentence_in_the_neural_voice_scores_done(
    model: SmartTurnModel, text: str
) -> None:
    assert model.predict(with_silence(render(text, "hibari"))) > 0.9


@pytest.mark.parametrize("text", ["So what I want to know is", "I can't come on Monday because"])
def test_a_clause_that_breaks_off_scores_not_done(model: SmartTurnModel, text: str) -> None:
    # Rendered alone these end with a final fall too; the model still hears them as open.
    assert model.predict(with_silence(render(text, "hibari"))) < 0.3
