"""The embedded models: the chosen STT and LLM and the hibari voice, loaded once per process.

Which LLM and STT run is a choice (:mod:`pipeline.services.embedded_specs`): Qwen2.5-Coder
1.5B (default) or 0.5B, or SmolLM2-135M; whisper base (default) or tiny.en. The better
models come as chunks from anonymous publishers' packages (:mod:`pipeline.services.model_chunks`),
which a registry may drop: the first run must never break on that. So a choice whose
parts are not installed is replaced by its fallback (SmolLM2-135M, whisper tiny.en) when
the registry is built, with a WARNING naming the fix, and so is one whose joined file
fails verification or loading when it loads. ``llm_spec`` / ``stt_spec`` say what is in
use (read them each time: a load-time fallback changes them), ``fallback_reasons`` and
:meth:`EmbeddedModels.status` say why. The small models and hibari ship whole, each a
:class:`~pipeline.services.model_files.ModelPackage` found without importing it.

:class:`EmbeddedModels` holds one :class:`EmbeddedModel` per role (``stt``, ``llm``,
``tts``): the model object, loaded lazily on first use (or all at once with
:meth:`EmbeddedModels.load_all`) and warmed up by one throw-away run, plus the
:class:`~pipeline.services.workers.WorkerPool` its inference runs in. All sessions share
them. Nothing here touches the network: faster-whisper is loaded with
``HF_HUB_OFFLINE=1`` from a local folder, hibari from an explicit model path (its other
voices would download) and llama.cpp with ``offline``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np
from loguru import logger

from pipeline.services.embedded_specs import (
    DEFAULT_LLM,
    DEFAULT_STT,
    HIBARI,
    LLMSpec,
    STTSpec,
    llm_spec,
    stt_spec,
)
from pipeline.services.model_files import ModelFileError
from pipeline.services.workers import WorkerPool

if TYPE_CHECKING:
    from faster_whisper import WhisperModel
    from hibari import Hibari
    from xllamacpp import Server

T = TypeVar("T")


def default_model_dir() -> Path:
    """Where chunked models are joined when the caller names no folder: the user's cache
    (shared by every checkout and test run; the server passes ``PARLEY_MODEL_DIR``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "parley" / "models"


@dataclass(frozen=True, slots=True)
class EmbeddedConfig:
    """Threads and pool sizes, chosen for a 2-core box.

    A pool's workers are how many calls run at once; its queue is how many may wait
    (past that: ``PoolSaturated``). STT runs one utterance at a time since one already
    uses both cores; the LLM runs as many requests as llama.cpp has slots (it decodes
    them in one batch); TTS sentences are short (~25 ms each), so two run at once and
    a longer queue is cheap.
    """

    stt_threads: int = 2  # CTranslate2 intra-op threads per transcription
    stt_workers: int = 1  # one utterance at a time already uses both cores
    stt_queue: int = 8
    # None: the LLM spec's (one: two collapse at llama.cpp's barriers when anything else
    # wants a core; see pipeline/services/embedded_specs.py).
    llm_threads: int | None = None
    llm_workers: int = 2  # = llama.cpp slots; concurrent requests share one batched decode
    llm_queue: int = 8
    # The smallest context of the choices, safe whichever loads; the loaded model's own is
    # ``EmbeddedModels.llm_spec.context`` (tokens per slot, prompt + answer).
    llm_context: int = 1024
    tts_threads: int = 1  # hibari runs ~80x realtime on one core
    tts_workers: int = 2
    tts_queue: int = 16
    warm_up: bool = True


# -- loaders (run in a loading thread) ------------------------------------------------------


def load_whisper(path: Path, config: EmbeddedConfig) -> WhisperModel:
    # huggingface_hub reads HF_HUB_OFFLINE when it is imported: set it before
    # faster_whisper imports it, so no code path can reach the hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from faster_whisper import WhisperModel

    return WhisperModel(
        str(path),
        device="cpu",
        compute_type="int8",
        cpu_threads=config.stt_threads,
        num_workers=config.stt_workers,
        local_files_only=True,
    )


def warm_whisper(model: WhisperModel) -> None:
    noise = np.random.default_rng(0).normal(0.0, 0.01, 16000).astype(np.float32)
    segments, _ = model.transcribe(noise, language="en", beam_size=1, without_timestamps=True)
    for _ in segments:  # the generator does the work
        pass


def load_llm(path: Path, config: EmbeddedConfig, spec: LLMSpec) -> Server:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_parallel = config.llm_workers
    params.kv_unified = False  # each slot owns spec.context tokens, none can starve another
    params.n_ctx = spec.context * config.llm_workers
    params.cpuparams.n_threads = config.llm_threads or spec.threads
    params.cpuparams_batch.n_threads = params.cpuparams.n_threads  # prompt reading too
    params.offline = True
    params.verbosity = -1  # llama.cpp logs every request to stderr otherwise
    # The server also listens on loopback; we call it in-process, so lock that door.
    params.api_keys = [secrets.token_urlsafe(24)]
    return xllamacpp.Server(params)


def warm_llm(server: Server) -> None:
    request = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    server.handle_chat_completions(request, lambda _chunk: False)


def load_hibari(path: Path, config: EmbeddedConfig) -> Hibari:
    from hibari import Hibari

    # An explicit model path: the bundled voice, never a download.
    return Hibari(voice="heart", model=str(path), threads=config.tts_threads)


def warm_hibari(tts: Hibari) -> None:
    for _ in tts.stream("Warm up."):  # also loads the G2P lexicons (lazy in hibari)
        pass


# -- the registry ---------------------------------------------------------------------------


class EmbeddedModel(Generic[T]):
    """One model, loaded at most once per process in a thread of its own, and its pool.

    Concurrent first callers share the one load; a failed load stays failed (the
    files will not fix themselves) and every :meth:`get` raises its error.
    """

    def __init__(
        self,
        role: str,
        label: str,
        load: Callable[[], T],
        warm_up: Callable[[T], None] | None,
        pool: WorkerPool,
    ) -> None:
        self.role = role
        self.label = label
        self.pool = pool
        self._load = load
        self._warm_up = warm_up
        self._lock = threading.Lock()
        self._future: Future[T] | None = None
        self._state = "not loaded"
        self._load_seconds: float | None = None
        self._warmup_seconds: float | None = None

    @property
    def ready(self) -> bool:
        return self._state == "ready"

    async def get(self) -> T:
        """The loaded model; the first call loads it (off the event loop)."""
        with self._lock:
            if self._future is None:
                self._future = Future()
                # RUNNING, so a cancelled waiter cannot cancel the load shared by all.
                self._future.set_running_or_notify_cancel()
                self._state = "loading"
                threading.Thread(target=self._run, name=f"load-{self.role}", daemon=True).start()
            future = self._future
        if future.done():
            return future.result()
        return await asyncio.wrap_future(future)

    def status(self) -> dict[str, Any]:
        return {
            "model": self.label,
            "state": self._state,
            "load_seconds": _rounded(self._load_seconds),
            "warmup_seconds": _rounded(self._warmup_seconds),
            "pool": self.pool.stats().as_dict(),
        }

    def _run(self) -> None:
        assert self._future is not None
        try:
            started = time.perf_counter()
            model = self._load()
            loaded = time.perf_counter()
            self._load_seconds = loaded - started
            if self._warm_up is not None:
                self._warm_up(model)  # the first run allocates and is several times slower
                self._warmup_seconds = time.perf_counter() - loaded
        except Exception as exc:
            self._state = f"failed: {exc}"
            self._future.set_exception(exc)
        else:
            self._state = "ready"
            self._future.set_result(model)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True, slots=True)
class _Choices:
    llm: str = DEFAULT_LLM
    stt: str = DEFAULT_STT
    model_dir: Path | None = None
    llm_threads: int | None = None


class EmbeddedModels:
    """The three embedded models and their pools, shared by every session.

    Use :meth:`shared` for the process-wide registry (:meth:`configure` sets what it is
    built with). ``llm`` and ``stt`` name the choices; chunked models are joined into
    ``model_dir`` (default: :func:`default_model_dir`). ``package_dirs`` overrides where
    files are, for tests: a role (``"stt"``, ``"llm"``, ``"tts"``) maps to a folder holding
    that role's files, a distribution name to a copy of that package.
    """

    _shared: ClassVar[EmbeddedModels | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()
    _choices: ClassVar[_Choices] = _Choices()

    def __init__(
        self,
        config: EmbeddedConfig | None = None,
        package_dirs: dict[str, Path] | None = None,
        *,
        llm: str = DEFAULT_LLM,
        stt: str = DEFAULT_STT,
        model_dir: Path | None = None,
    ) -> None:
        self.config = cfg = config or EmbeddedConfig()
        self.model_dir = model_dir or default_model_dir()
        self.choices = _Choices(llm, stt, model_dir, cfg.llm_threads)
        self._dirs = dict(package_dirs or {})
        self._fallbacks: dict[str, str] = {}
        # The cheap check now, so llm_spec.supports_tools is right before any session starts.
        self._llm_spec: LLMSpec = self._checked("llm", llm_spec(llm))
        self._stt_spec: STTSpec = self._checked("stt", stt_spec(stt))
        warm = cfg.warm_up
        stt_label, llm_label = self._stt_spec.label, self._llm_spec.label
        self.stt: EmbeddedModel[WhisperModel] = EmbeddedModel(
            "stt",
            stt_label,
            lambda: self._load("stt", lambda path, _spec: load_whisper(path, cfg)),
            warm_whisper if warm else None,
            WorkerPool(f"speech-to-text ({stt_label})", cfg.stt_workers, cfg.stt_queue),
        )
        self.llm: EmbeddedModel[Server] = EmbeddedModel(
            "llm",
            llm_label,
            lambda: self._load("llm", lambda path, spec: load_llm(path, cfg, spec)),
            warm_llm if warm else None,
            WorkerPool(f"LLM ({llm_label})", cfg.llm_workers, cfg.llm_queue),
        )
        tts_dir = self._dirs.get("tts")
        self.tts: EmbeddedModel[Hibari] = EmbeddedModel(
            "tts",
            "hibari heart",
            lambda: load_hibari(HIBARI.locate(tts_dir), cfg),
            warm_hibari if warm else None,
            WorkerPool("text-to-speech (hibari)", cfg.tts_workers, cfg.tts_queue),
        )

    @classmethod
    def configure(
        cls,
        *,
        llm: str = DEFAULT_LLM,
        stt: str = DEFAULT_STT,
        model_dir: Path | None = None,
        llm_threads: int | None = None,
    ) -> None:
        """Set what :meth:`shared` builds (no arguments: the defaults again). A shared
        registry built with other choices stops being the shared one (whoever holds it
        keeps it); unknown names raise ValueError."""
        llm_spec(llm), stt_spec(stt)  # validates the names
        choices = _Choices(llm, stt, model_dir, llm_threads)
        with cls._shared_lock:
            cls._choices = choices
            if cls._shared is not None and cls._shared.choices != choices:
                cls._shared = None

    @classmethod
    def shared(cls) -> EmbeddedModels:
        """The process-wide registry (models still load lazily)."""
        with cls._shared_lock:
            if cls._shared is None:
                chosen = cls._choices
                cls._shared = cls(
                    EmbeddedConfig(llm_threads=chosen.llm_threads),
                    llm=chosen.llm,
                    stt=chosen.stt,
                    model_dir=chosen.model_dir,
                )
            return cls._shared

    @property
    def llm_spec(self) -> LLMSpec:
        """The LLM in use: the choice, or its fallback (may change once, at load time)."""
        return self._llm_spec

    @property
    def stt_spec(self) -> STTSpec:
        """The STT in use: the choice, or its fallback (may change once, at load time)."""
        return self._stt_spec

    @property
    def fallback_reasons(self) -> dict[str, str]:
        """Per role that fell back (``"llm"``, ``"stt"``): why."""
        return dict(self._fallbacks)

    @property
    def models(self) -> tuple[EmbeddedModel[Any], ...]:
        return (self.stt, self.llm, self.tts)

    async def load_all(self) -> None:
        """Load and warm every model (at start-up); raises the first failure after all
        have been tried, so /health shows each one's state."""
        results = await asyncio.gather(*(m.get() for m in self.models), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def status(self) -> dict[str, dict[str, Any]]:
        """Per role: model, state ("not loaded", "loading", "ready", "failed: reason"),
        load and warm-up seconds, pool counts, and why it fell back, if it did."""
        out = {m.role: m.status() for m in self.models}
        for role, reason in self._fallbacks.items():
            out[role]["fallback"] = reason
        return out

    def shutdown(self) -> None:
        """Stop the pools (queued calls are dropped; running ones finish). A shut-down
        registry is no longer the shared one: an app started again in this process (tests,
        an embedding host) gets a fresh one instead of pools that refuse work."""
        cls = type(self)
        with cls._shared_lock:
            if cls._shared is self:
                cls._shared = None
        for model in self.models:
            model.pool.shutdown()

    # -- choices and fallbacks ------------------------------------------------------------

    def _spec(self, role: str) -> LLMSpec | STTSpec:
        return self._llm_spec if role == "llm" else self._stt_spec

    def _checked(self, role: str, spec: Any) -> Any:
        reason = spec.available(self.model_dir, self._dirs)
        return (
            spec if reason is None or spec.fallback is None else self._fall_back(role, spec, reason)
        )

    def _fall_back(self, role: str, spec: LLMSpec | STTSpec, reason: str) -> Any:
        assert spec.fallback is not None  # both callers fall back only to a named spec
        fallback = llm_spec(spec.fallback) if role == "llm" else stt_spec(spec.fallback)
        self._fallbacks[role] = f"{spec.name} unavailable: {reason}"
        logger.warning(
            "embedded {}: {} is unavailable, using {} instead: {}",
            role.upper(),
            spec.name,
            fallback.name,
            reason,
        )
        setattr(self, f"_{role}_spec", fallback)
        model = getattr(self, role, None)
        if model is not None:  # a load-time fallback: say what is loading
            model.label = fallback.label
        return fallback

    def _load(self, role: str, load: Callable[[Path, Any], T]) -> T:
        """Locate (joining chunks if needed) and load ``role``'s spec, in the loading
        thread; a chunked choice that fails falls back to its small model."""
        spec = self._spec(role)
        try:
            return load(spec.locate(self.model_dir, self._dirs), spec)
        except (ModelFileError, OSError, RuntimeError, ValueError) as exc:
            if spec.fallback is None:
                raise
            fallback = self._fall_back(role, spec, str(exc))
        return load(fallback.locate(self.model_dir, self._dirs), fallback)
