"""The Silero model: its weights file, found and checked without importing silero_vad,
and batched inference equal to row-by-row inference."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pipeline.hearing.silero import MODEL_BYTES, SileroModel, find_silero_model
from pipeline.services.model_files import ModelFileError


@pytest.fixture(scope="module")
def model() -> SileroModel:
    return SileroModel.shared()


# -- model file ---------------------------------------------------------------------------


def test_model_file_found_without_importing_silero_package() -> None:
    # In a fresh interpreter: silero_vad's __init__ imports torch, which is not installed.
    code = (
        "import sys; from pipeline.hearing.silero import find_silero_model; "
        "p = find_silero_model(); "
        "assert 'silero_vad' not in sys.modules and 'torch' not in sys.modules; print(p)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip().endswith("silero_vad/data/silero_vad.onnx")
    assert find_silero_model().stat().st_size == MODEL_BYTES


def test_wrong_size_model_is_rejected(tmp_path) -> None:
    data = tmp_path / "silero_vad" / "data"
    data.mkdir(parents=True)
    (data / "silero_vad.onnx").write_bytes(find_silero_model().read_bytes()[:-100])
    with pytest.raises(ModelFileError) as error:
        find_silero_model(tmp_path / "silero_vad")
    message = str(error.value)
    assert "2,327,424 bytes, expected 2,327,524" in message
    assert "pip install --no-deps silero-vad==6.2.3" in message


def test_missing_model_is_rejected(tmp_path) -> None:
    with pytest.raises(ModelFileError, match=r"missing; reinstall with `pip install --no-deps"):
        find_silero_model(tmp_path)


# -- the model ----------------------------------------------------------------------------


def test_shared_model_is_one_instance(model: SileroModel) -> None:
    assert SileroModel.shared() is model


def test_batch_rows_equal_single_rows(model: SileroModel) -> None:
    rng = np.random.default_rng(7)
    windows = (rng.standard_normal((9, 576)) * 0.1).astype(np.float32)
    states = (rng.standard_normal((2, 9, 128)) * 0.5).astype(np.float32)
    probs, new_states = model.infer(windows, states)
    assert probs.shape == (9,) and new_states.shape == (2, 9, 128)
    for row in range(9):
        alone, alone_state = model.infer(
            windows[row : row + 1], np.ascontiguousarray(states[:, row : row + 1])
        )
        np.testing.assert_allclose(alone[0], probs[row], atol=1e-6)
        np.testing.assert_allclose(alone_state[:, 0], new_states[:, row], atol=1e-6)
