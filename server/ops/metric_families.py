"""What ``/metrics`` counts about calls: the metric families, by concern, with their names,
help, labels and buckets (docs/operations.md lists them).

Each group registers its families on the app's own registry when it is built; the
observers (:mod:`server.ops.session_observer`, :mod:`server.ops.http_metrics`) feed them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from pipeline.hearing.discards import REASONS as DISCARD_REASONS

# Voice-to-voice and TTFB: a fast answer is ~0.3 s, a slow one several seconds.
LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)


class SessionFamilies:
    """Sessions (one per peer connection): created, closed and how long they lasted."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.created = Counter(
            "parley_sessions_created_total",
            "Sessions (peer connections) created.",
            registry=registry,
        )
        self.closed = Counter(
            "parley_sessions_closed_total",
            "Sessions closed, by reason.",
            ["reason"],
            registry=registry,
        )
        self.duration = Histogram(
            "parley_session_duration_seconds",
            "How long sessions lasted.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )


class TurnFamilies:
    """The conversation's turns: who spoke, and how the bot yielded."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.user_turns = Counter(
            "parley_user_turns_total",
            "User turns that reached the context (spoken or typed).",
            registry=r,
        )
        self.bot_turns = Counter(
            "parley_bot_turns_total",
            "Bot turns, completed or interrupted.",
            ["outcome"],
            registry=r,
        )
        self.interruptions = Counter(
            "parley_interruptions_total", "Barge-ins: the user interrupted the bot.", registry=r
        )
        self.merged = Counter(
            "parley_user_turns_merged_total",
            "User turns taken back because the user went on right after them.",
            registry=r,
        )
        self.discarded = Counter(
            "parley_user_speech_discarded_total",
            "User speech that made no turn, by reason: backchannel (over the bot, which went "
            "on), echo (the bot's own words came back), no_words (the STT heard none, or "
            "none in time), muted (PARLEY_USER_MUTE), stt_error (the STT failed), call_ended "
            "(the call ended while it was being recorded or transcribed).",
            ["reason"],
            registry=r,
        )
        for reason in DISCARD_REASONS:  # every reason shows, at 0 until it happens
            self.discarded.labels(reason)
        self.preemptive = Counter(
            "parley_preemptive_replies_total",
            "Replies started before the user's turn ended: used (played when it ended) or "
            "wasted (dropped unseen).",
            ["outcome"],
            registry=r,
        )
        self.pauses = Counter(
            "parley_bot_pauses_total",
            "The bot paused at the user's voice: resumed (a backchannel, a cough, its own "
            "echo), interrupted, or unconfirmed (paused at an onset the VAD then dropped).",
            ["outcome"],
            registry=r,
        )


class TurnTimingFamilies:
    """How long the turn-taking took: the answer, the turn's end, the model, a pause."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.voice_to_voice = Histogram(
            "parley_voice_to_voice_seconds",
            "From the end of the user's speech to the bot's first audio out.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.turn_end_wait = Histogram(
            "parley_user_turn_end_wait_seconds",
            "From the end of the user's speech to the end of their turn (the VAD's stop "
            "window included).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.turn_model = Histogram(
            "parley_turn_model_seconds",
            "The end-of-turn model: time in its queue, and inference (features included).",
            ["stage"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.pause_seconds = Histogram(
            "parley_bot_pause_seconds",
            "How long the bot stayed silent before it resumed.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )


class ServiceFamilies:
    """The model calls (STT, LLM, TTS): latency, usage, and every kind of error."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.errors = Counter(
            "parley_errors_total",
            "Errors by kind: stt, llm, tts (a failed model call), rtvi (a bad client "
            "message), handler (a session's handler raised; the call went on), http_5xx.",
            ["kind"],
            registry=r,
        )
        self.ttfb = Histogram(
            "parley_service_ttfb_seconds",
            "Time to first byte of a model call.",
            ["service"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.processing = Histogram(
            "parley_service_processing_seconds",
            "Whole processing time of a model call.",
            ["service"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "parley_llm_tokens_total", "LLM tokens used.", ["direction"], registry=r
        )
        self.reasoning_tokens = Counter(
            "parley_llm_reasoning_tokens_total",
            "LLM output tokens spent reasoning, as the endpoint reports them.",
            registry=r,
        )
        self.thought_characters = Counter(
            "parley_llm_thought_characters_total",
            "Characters of LLM reasoning streamed (never spoken).",
            registry=r,
        )
        self.tts_characters = Counter(
            "parley_tts_characters_total", "Characters sent to text-to-speech.", registry=r
        )
