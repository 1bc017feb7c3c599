"""A Pipecat SmallWebRTC voice bot equivalent to Parley's pipeline, for bench.load.

Runs in its own venv (bench/.venv-pipecat, see requirements.txt), never in Parley's.
One pipeline per peer connection:

    SmallWebRTC input → Silero VAD (user aggregator) → OpenAI STT (whisper-1, segmented)
    → user context aggregator (speech-timeout or Smart Turn stop strategy) → OpenAI LLM → OpenAI TTS
    (raw PCM 24 kHz) → SmallWebRTC output → assistant aggregator; RTVI on.

HTTP: ``POST /api/offer`` (SDP offer → answer, ``pc_id``) and ``PATCH /api/offer``
(trickled ICE candidates), the SmallWebRTC contract; ``GET /health`` for the harness.

    bench/.venv-pipecat/bin/python bench/pipecat/bot.py --port 7861 \
        --base-url http://127.0.0.1:PORT/v1 --api-key sk-stub

Every option also reads an environment variable (PIPECAT_BOT_PORT, OPENAI_BASE_URL,
OPENAI_API_KEY, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from loguru import logger
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.openai.stt import OpenAISTTService
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection
from pipecat.transports.smallwebrtc.request_handler import (
    IceCandidate,
    SmallWebRTCPatchRequest,
    SmallWebRTCRequest,
    SmallWebRTCRequestHandler,
)
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport
from pipecat.turns.user_start import VADUserTurnStartStrategy
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.workers.runner import WorkerRunner

# Parley's default system prompt (server/settings.py), so the LLM request is alike.
SYSTEM_PROMPT = (
    "You are Parley, a friendly voice assistant. Your answers are spoken aloud, so keep "
    "them short: one or two sentences, plain words, no lists, no markdown, no emoji."
)


def options() -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default=env("PIPECAT_BOT_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env("PIPECAT_BOT_PORT", "7861")))
    p.add_argument("--base-url", default=env("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"))
    p.add_argument("--api-key", default=env("OPENAI_API_KEY", "sk-stub"))
    p.add_argument("--llm-model", default=env("PIPECAT_LLM_MODEL", "gpt-4o-mini"))
    p.add_argument("--stt-model", default=env("PIPECAT_STT_MODEL", "whisper-1"))
    p.add_argument("--tts-model", default=env("PIPECAT_TTS_MODEL", "gpt-4o-mini-tts"))
    p.add_argument(
        "--vad-confidence", type=float, default=float(env("PIPECAT_VAD_CONFIDENCE", "0.7"))
    )
    p.add_argument(
        "--vad-start-secs", type=float, default=float(env("PIPECAT_VAD_START_SECS", "0.2"))
    )
    p.add_argument(
        "--vad-stop-secs", type=float, default=float(env("PIPECAT_VAD_STOP_SECS", "0.2"))
    )
    p.add_argument(
        "--user-speech-timeout",
        type=float,
        default=float(env("PIPECAT_USER_SPEECH_TIMEOUT", "0.6")),
    )
    p.add_argument(
        "--stop",
        choices=["speech-timeout", "smart-turn"],
        default=env("PIPECAT_STOP", "speech-timeout"),
        help="user-turn stop strategy: Pipecat's speech timeout (like Parley's fixed window) "
        "or its default, the Smart Turn v3.2 model (LocalSmartTurnAnalyzerV3)",
    )
    p.add_argument("--log-level", default=env("PIPECAT_LOG_LEVEL", "INFO"))
    return p.parse_args()


ARGS = options()
logger.remove()
logger.add(sys.stderr, level=ARGS.log_level)

handler = SmallWebRTCRequestHandler()  # MULTIPLE connections, no ICE servers (127.0.0.1 only)
runs: set[asyncio.Task[None]] = set()


async def run_bot(connection: SmallWebRTCConnection) -> None:
    """One pipeline for one peer connection, until the peer leaves."""
    transport = SmallWebRTCTransport(
        webrtc_connection=connection,
        params=TransportParams(audio_in_enabled=True, audio_out_enabled=True),
    )
    stt = OpenAISTTService(
        api_key=ARGS.api_key,
        base_url=ARGS.base_url,
        settings=OpenAISTTService.Settings(model=ARGS.stt_model),
    )
    llm = OpenAILLMService(
        api_key=ARGS.api_key,
        base_url=ARGS.base_url,
        settings=OpenAILLMService.Settings(model=ARGS.llm_model, system_instruction=SYSTEM_PROMPT),
    )
    tts = OpenAITTSService(
        api_key=ARGS.api_key,
        base_url=ARGS.base_url,
        sample_rate=24000,
        settings=OpenAITTSService.Settings(model=ARGS.tts_model, voice="alloy"),
    )
    context = LLMContext()
    vad = SileroVADAnalyzer(
        params=VADParams(
            confidence=ARGS.vad_confidence,
            start_secs=ARGS.vad_start_secs,
            stop_secs=ARGS.vad_stop_secs,
        )
    )
    aggregators = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(
            vad_analyzer=vad,
            user_turn_strategies=UserTurnStrategies(
                start=[VADUserTurnStartStrategy()],
                # None: Pipecat's default stop strategy, the Smart Turn model.
                stop=None
                if ARGS.stop == "smart-turn"
                else [
                    SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=ARGS.user_speech_timeout)
                ],
            ),
        ),
    )
    pipeline = Pipeline([
        transport.input(),
        stt,
        aggregators.user(),
        llm,
        tts,
        transport.output(),
        aggregators.assistant(),
    ])  # fmt: skip
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=16000, audio_out_sample_rate=24000),
        enable_rtvi=True,
        idle_timeout_secs=None,
    )

    @transport.event_handler("on_client_disconnected")
    async def _gone(_transport: Any, _client: Any) -> None:
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()


def spawn(connection: SmallWebRTCConnection) -> None:
    task = asyncio.get_running_loop().create_task(run_bot(connection))
    runs.add(task)
    task.add_done_callback(runs.discard)


@asynccontextmanager
async def lifespan(_app: FastAPI):
    yield
    for task in list(runs):
        task.cancel()
    await asyncio.gather(*runs, return_exceptions=True)
    await handler.close()


app = FastAPI(lifespan=lifespan)


@app.get("/health")
async def health() -> dict[str, Any]:
    return {"status": "ok", "sessions": len(runs)}


@app.post("/api/offer")
async def offer(request: Request) -> dict[str, Any]:
    body = await request.json()
    fields = {k: body[k] for k in ("sdp", "type", "pc_id", "restart_pc") if k in body}
    fields["request_data"] = body.get("request_data", body.get("requestData"))

    async def on_connection(connection: SmallWebRTCConnection) -> None:
        spawn(connection)

    answer = await handler.handle_web_request(SmallWebRTCRequest(**fields), on_connection)
    return answer or {}


@app.patch("/api/offer")
async def candidates(request: Request) -> dict[str, str]:
    body = await request.json()
    patch = SmallWebRTCPatchRequest(
        pc_id=body["pc_id"],
        candidates=[IceCandidate(c.get("candidate", ""), c.get("sdp_mid", "0"),
                                 int(c.get("sdp_mline_index", 0)))
                    for c in body.get("candidates", [])],
    )  # fmt: skip
    await handler.handle_patch_request(patch)
    return {"status": "success"}


if __name__ == "__main__":
    uvicorn.run(app, host=ARGS.host, port=ARGS.port, log_level="warning")
