"""The Smart Turn v3.2 end-of-turn model: its weights file and one onnxruntime session.

The file (BSD-2-Clause) ships inside the ``pipecat-ai`` 1.14.0 wheel, installed with
``--no-deps``; it is found with ``importlib.util.find_spec`` and pipecat is never
imported. It is checked by size and SHA-256 before it is loaded.

Input: the last ≤ 8 s of the user's turn at 16 kHz, left-padded with zeros to 8 s,
normalised to zero mean and unit variance, as Whisper log-mel features ``[80, 800]``
(faster-whisper's :class:`FeatureExtractor`, already a dependency for STT, with no
padding of its own). Output: the probability that the turn is complete.

Speed, measured here on one thread: about 42 ms per clip plus 3-6 ms of features. A
batch costs the same per clip (batch 1: 42 ms, 2: 86, 4: 182, 8: 367, 16: 756), so
batching saves nothing on a CPU and delays the first answer of the batch; sessions are
served one clip at a time instead (:mod:`pipeline.hearing.turn_scorer`).

Threading: read-only after load; one caller at a time (the scorer's worker thread).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from faster_whisper.feature_extractor import FeatureExtractor

from pipeline.services.model_files import ModelPackage

SAMPLE_RATE = 16000
WINDOW_SECONDS = 8
WINDOW = WINDOW_SECONDS * SAMPLE_RATE

PACKAGE = "pipecat"
MODEL_PATH = "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
MODEL_BYTES = 8_679_182
MODEL_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"


SMART_TURN = ModelPackage(
    "pipecat-ai",
    "1.14.0",
    PACKAGE,
    entry=MODEL_PATH,
    files=((MODEL_PATH, MODEL_BYTES),),
    no_deps=True,
    sha256=((MODEL_PATH, MODEL_SHA256),),
)


def find_smart_turn_model(package_dir: Path | None = None) -> Path:
    """Path of the Smart Turn v3.2 ONNX file, checked by size and SHA-256 (raises
    :class:`~pipeline.services.model_files.ModelFileError`). ``package_dir`` defaults to
    the installed ``pipecat`` package, found without importing it (its ``__init__``
    needs dependencies we do not install)."""
    return SMART_TURN.locate(package_dir)


class SmartTurnModel:
    """Scores a stretch of a user's speech: the probability that the turn is complete."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = find_smart_turn_model() if path is None else path
        options = ort.SessionOptions()
        # One core per inference: sessions queue, they do not fight over threads.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(
            str(self.path), options, providers=["CPUExecutionProvider"]
        )
        self._features = FeatureExtractor(feature_size=80, sampling_rate=SAMPLE_RATE)
        self.predict(np.zeros(SAMPLE_RATE, np.int16))  # allocate the arenas now

    def features(self, audio: np.ndarray) -> np.ndarray:
        """``[80, 800]`` log-mel features of 16 kHz audio (int16 or float in -1..1)."""
        x = np.asarray(audio)
        x = x.astype(np.float32) / 32768.0 if x.dtype == np.int16 else x.astype(np.float32)
        x = x[-WINDOW:]
        padded = np.zeros(WINDOW, np.float32)
        padded[WINDOW - x.size :] = x
        normalised = (padded - padded.mean()) / np.sqrt(padded.var() + 1e-7)
        return self._features(normalised, padding=0)

    def predict(self, audio: np.ndarray) -> float:
        """Probability (0..1) that the speech in ``audio`` ends a complete turn."""
        batch = self.features(audio)[np.newaxis]
        (out,) = self._session.run(None, {"input_features": batch})
        return float(np.asarray(out).reshape(-1)[0])
