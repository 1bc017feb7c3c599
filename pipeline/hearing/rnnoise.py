"""The RNNoise library for the noise suppressor before the VAD: the file in the
``pyrnnoise`` wheel (found without importing the package, whose ``__init__`` imports an
audio I/O library we do not install), checked by size and SHA-256 per machine, since we
execute it, and loaded once per process (:func:`shared_rnnoise`).

The suppressor itself is :mod:`pipeline.audio.noise_suppression`; this module is only
where its library comes from, beside the other models hearing loads (Silero, Smart Turn).
"""

from __future__ import annotations

import platform
import threading

from pipeline.audio.noise_suppression import NoiseSuppressionError, RNNoiseLibrary
from pipeline.services.model_files import ModelFileError, ModelPackage

VERSION = "0.4.5"
LIBRARY = "librnnoise.so"
# (bytes, SHA-256) of the library in each Linux wheel of that version.
PINNED = {
    "x86_64": (14_840_960, "de5120abce147a72ba343296744ae7cc0a97298e19307c7d3f01cce8c34b18ff"),
    "aarch64": (14_887_704, "c7f34a5944f385721f89b7be21b9ae8eb67e3085da2571260a46e1c9fc61d90a"),
}

_lock = threading.Lock()
_shared: RNNoiseLibrary | None = None


def rnnoise_package(machine: str | None = None) -> ModelPackage:
    """The pinned ``pyrnnoise`` library for ``machine`` (default: this one)."""
    arch = machine or platform.machine()
    pinned = PINNED.get(arch)
    if pinned is None:
        raise NoiseSuppressionError(
            f"noise suppression (RNNoise) has no pinned library for {arch}; "
            "set PARLEY_NOISE_SUPPRESSION=off"
        )
    size, sha256 = pinned
    return ModelPackage("pyrnnoise", VERSION, "pyrnnoise", LIBRARY, ((LIBRARY, size),),
                        no_deps=True, sha256=((LIBRARY, sha256),))  # fmt: skip


def shared_rnnoise() -> RNNoiseLibrary:
    """The process's RNNoise library, found, checked and loaded on first use; raises
    :class:`NoiseSuppressionError` saying how to install it."""
    global _shared
    with _lock:
        if _shared is None:
            try:
                _shared = RNNoiseLibrary(rnnoise_package().locate())
            except (ModelFileError, OSError) as exc:
                raise NoiseSuppressionError(
                    f"noise suppression (RNNoise) cannot load: {exc}"
                ) from exc
        return _shared
