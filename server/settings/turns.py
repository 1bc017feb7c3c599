"""Turn-taking: the VAD, how the end of a user's turn is decided (fixed or adaptive),
preemptive replies and merged turns, idle users, mute strategies, turn completion, and
barge-in (interruptions, backchannels, the bot's own echo)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from pipeline.interruptions.judge import DEFAULT_BACKCHANNELS
from pipeline.turns.languages import backchannels as language_backchannels
from pipeline.turns.mute_names import MuteName
from server.settings.lists import split_list


class TurnSettings(BaseModel):
    """When the user has the turn, when it ends, and when the bot may be interrupted."""

    language: str = Field(
        "en",
        description="The callers' language, an ISO 639-1 code (en, es, fr, de, …): the words "
        "the adaptive turn end reads (en, es, fr and de have word cues; other languages only "
        "punctuation, with a WARNING at start), the default backchannels, and the language "
        "the STT is asked for (the embedded whisper; the OpenAI-compatible STT's "
        "'language'). A transcript the STT reports in another cue language is read in that "
        "one.",
    )
    vad_confidence: float = Field(0.7, gt=0, lt=1)
    vad_start_secs: float = Field(0.2, gt=0)
    vad_stop_secs: float = Field(
        0.2,
        gt=0,
        description="Silence before the VAD reports a stop: the earliest a turn can end.",
    )
    vad_pause_secs: float = Field(
        0.064,
        ge=0,
        description="Silence after which the words (and, from 96 ms of silence on, the "
        "end-of-turn model) are asked on speculation, before the stop window closes, so "
        "that their answers (and a held reply to a clear question) are ready at the "
        "stop; 0: only at the stop. "
        "A pause the user talks through costs one extra STT request.",
    )
    turn_end: Literal["adaptive", "fixed"] = Field(
        "adaptive",
        description="How the end of the user's turn is decided: adaptive (the end-of-turn "
        "model, the words and the silence together) or fixed (user_speech_timeout after "
        "every pause).",
    )
    user_speech_timeout: float = Field(
        0.6, ge=0, description="fixed: silence after the VAD stop before the turn ends."
    )
    turn_end_question_wait: tuple[float, float] = Field(
        (0.0, 0.7),
        description="adaptive: seconds from the end of speech to the end of a turn whose "
        "words end with a question mark, when the model is sure it is done / sure it is not.",
    )
    turn_end_statement_wait: tuple[float, float] = Field(
        (0.7, 1.2), description="adaptive: the same for a turn whose words end otherwise."
    )
    turn_end_max_wait: float = Field(
        2.0,
        gt=0,
        description="adaptive: the wait after unfinished words (a dangling 'and', 'for', "
        "'um'), and the longest of all.",
    )
    turn_end_confident: float = Field(
        0.9, gt=0, le=1, description="adaptive: model probability that counts as 'done'."
    )
    turn_end_doubtful: float = Field(
        0.3, ge=0, lt=1, description="adaptive: model probability that counts as 'not done'."
    )
    turn_end_score_timeout: float = Field(
        0.35,
        ge=0,
        description="adaptive: how long after the VAD stop to wait for the model before "
        "deciding without it.",
    )
    preemptive_replies: bool = Field(
        True,
        description="adaptive: start the answer, held, shortly before the turn is expected "
        "to end; play it when it does, drop it unseen if the user goes on.",
    )
    turn_merge_window: float = Field(
        1.0,
        ge=0,
        description="If the user speaks again within this many seconds of the end of a turn "
        "that is being answered, the answer stops and the two make one turn (0: off).",
    )
    user_turn_stop_timeout: float = Field(5.0, gt=0)
    user_idle_timeout: float = Field(
        0.0,
        ge=0,
        description="Seconds of user silence after the bot spoke before the client is told "
        "(server-message user-idle) and the bot checks in (0 = off).",
    )
    user_idle_check_ins: int = Field(
        2, ge=0, description="Check-ins of an idle user before the call ends (see below)."
    )
    user_idle_end_call: bool = Field(
        True, description="End the call when the user stays idle after the last check-in."
    )
    user_idle_prompt: str = Field(
        "The user has been silent for a while. In one short sentence, check whether they "
        "are still there.",
        description="What the LLM is told (a system message) to check in on an idle user.",
    )
    user_idle_goodbye: str = Field(
        "It seems you have stepped away. Goodbye for now!",
        description="Spoken before an idle call ends; empty: hang up without a word.",
    )
    user_mute: Annotated[list[MuteName], NoDecode, BeforeValidator(split_list)] = Field(
        default_factory=list,
        description="When the user is not listened to (JSON list or comma-separated): "
        "first_bot_speech, until_first_bot_turn, bot_speaking, function_calls.",
    )
    turn_completion: bool = Field(
        False,
        description="The LLM starts each answer with a turn marker: complete, or cut off "
        "(short wait) or thinking (long wait); only complete turns are answered.",
    )
    turn_completion_short_timeout: float = Field(
        5.0, gt=0, description="turn_completion: seconds before a cut-off user is prompted."
    )
    turn_completion_long_timeout: float = Field(
        15.0, gt=0, description="turn_completion: seconds before a thinking user is prompted."
    )
    min_words_to_interrupt: int = Field(
        0,
        ge=0,
        description="Words needed to barge in while the bot speaks (0 = any speech; with "
        "pause_on_interruption a backchannel does not interrupt anyway).",
    )
    pause_on_interruption: bool = Field(
        True,
        description="At the user's voice over the bot, pause the bot (silent within a frame) "
        "and decide: a real interruption cancels the reply, a backchannel, a cough or the "
        "bot's own echo lets it go on from where it paused. False: cancel at once.",
    )
    pause_at_onset: Literal["auto", "on", "off"] = Field(
        "auto",
        description="pause_on_interruption: pause at the VAD's first speech window over "
        "the bot, not at its confirmation vad_start_secs later (a barge-in ~150 ms sooner); "
        "what the VAD then drops resumes at once. auto: once the echo canceller has ruled "
        "out the bot's voice coming back (what it leaves of an echo may cross the VAD for "
        "a window); on: always; off: at the confirmation.",
    )
    backchannels: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BACKCHANNELS),
        description="Utterances that only show the user is listening (JSON list); made of "
        "these phrases alone, speech over the bot does not interrupt it. Unset: the "
        "language's list (English for a language without one).",
    )
    max_backchannel_seconds: float = Field(
        1.0, gt=0, description="Speech over the bot longer than this is an interruption."
    )
    false_interruption_timeout: float = Field(
        1.0,
        gt=0,
        description="No words within this long after speech over the bot ended: the bot goes on.",
    )
    echo_cancellation: bool = Field(
        True,
        description="Cancel the bot's own voice in the user's audio (a speakerphone, a "
        "client without echo cancellation) with WebRTC's AEC3, what was played as reference.",
    )
    noise_suppression: Literal["off", "rnnoise"] = Field(
        "off",
        description="Take steady background noise out of the caller's audio before the "
        "VAD hears it (after the echo canceller; the STT still hears the audio without it): "
        "off, or rnnoise (RNNoise from the pyrnnoise package, in a worker thread: about "
        "17 % of a core per call). The server does not start if rnnoise cannot load.",
    )

    @field_validator("language", mode="before")
    @classmethod
    def _language_code(cls, value: Any) -> Any:
        code = value.strip().lower() if isinstance(value, str) else value
        if not isinstance(code, str) or not re.fullmatch(r"[a-z]{2}", code):
            raise ValueError("language must be a two-letter ISO 639-1 code: en, es, fr, de, …")
        return code

    @model_validator(mode="after")
    def _language_backchannels(self) -> TurnSettings:
        if "backchannels" not in self.model_fields_set:
            self.backchannels = list(language_backchannels(self.language))
            self.__pydantic_fields_set__.discard("backchannels")  # still the default
        return self

    @model_validator(mode="after")
    def _turn_end_thresholds(self) -> TurnSettings:
        if self.turn_end_doubtful >= self.turn_end_confident:
            raise ValueError("turn_end_doubtful must be below turn_end_confident")
        for name in ("turn_end_question_wait", "turn_end_statement_wait"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"{name} must be [sure-done, sure-not-done] with 0 <= a <= b")
        return self
