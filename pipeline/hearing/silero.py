"""The Silero VAD model: its weights file (from the silero-vad wheel, found without
importing the package) and one shared onnxruntime session that scores batches of windows.

Threading: the model is read-only after load and onnxruntime allows concurrent runs.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnxruntime as ort

from pipeline.services.model_files import ModelPackage

SAMPLE_RATE = 16000
WINDOW = 512  # new samples per inference (32 ms)
CONTEXT = 64  # samples of the previous window prepended to each input
STATE_SIZE = 128

MODEL_FILE = "silero_vad.onnx"
MODEL_BYTES = 2_327_524
SILERO_VAD = ModelPackage(
    "silero-vad",
    "6.2.3",
    "silero_vad",
    entry=f"data/{MODEL_FILE}",
    files=((f"data/{MODEL_FILE}", MODEL_BYTES),),
    no_deps=True,
)

# Model variant: silero-vad also ships silero_vad_16k_op15.onnx and
# silero_vad_op18_ifless.onnx. Measured here (`python -m bench.vad --variants`, 2 cores,
# onnxruntime 1.31.1) they give the same probabilities (op15 identical, op18 within 6e-7
# on speech) but little speed: op18 is ~10% faster at batch 1 and equal at batch 10-50,
# within the drift of this shared box; op15 is equal. Since sessions are batched, we keep
# the canonical file: the one the package documents and whose size we pin.


def find_silero_model(package_dir: Path | None = None) -> Path:
    """Path of ``silero_vad/data/silero_vad.onnx``, checked by size (raises
    :class:`~pipeline.services.model_files.ModelFileError`).

    ``package_dir`` defaults to the installed ``silero_vad`` package, found without
    importing it (its ``__init__`` imports torch, which we do not install).
    """
    return SILERO_VAD.locate(package_dir)


class SileroModel:
    """One onnxruntime session of Silero VAD; read-only after load, safe to share.

    Use :meth:`shared` for the process-wide instance.
    """

    _shared: ClassVar[SileroModel | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: Path | None = None) -> None:
        self.path = find_silero_model() if path is None else path
        options = ort.SessionOptions()
        # Many sessions share a few cores: parallelism comes from batching, not threads.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: graph clean-up warnings are noise
        self._session = ort.InferenceSession(
            str(self.path), options, providers=["CPUExecutionProvider"]
        )
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        # The first run allocates arenas; pay that at load, not on a user's first word.
        self.infer(
            np.zeros((1, CONTEXT + WINDOW), np.float32), np.zeros((2, 1, STATE_SIZE), np.float32)
        )

    @classmethod
    def shared(cls) -> SileroModel:
        """The process-wide model, loaded on first use."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def infer(self, windows: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Run one batch.

        ``windows``: float32 ``[batch, 576]`` (64 context + 512 new samples, in -1..1);
        ``state``: float32 ``[2, batch, 128]``. Returns speech probabilities ``[batch]``
        and the new state ``[2, batch, 128]``. Rows are independent: the result of a row
        is the same as running it alone.
        """
        probs, new_state = self._session.run(
            None, {"input": windows, "state": state, "sr": self._sr}
        )
        return probs[:, 0], new_state
