"""What the user does: speech as the VAD hears it, what the STT made of it, and the turns
the turn controller makes of both (started, predicted to end, stopped, discarded, muted,
idle)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.events.event import Event

# -- user speech (VAD) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpeechStarted(Event):
    """The VAD heard the user start speaking; ``t`` is the speech onset."""

    t: float


@dataclass(frozen=True, slots=True)
class SpeechOnset(Event):
    """The VAD hears what may be the start of speech (not yet confirmed: ``SpeechStarted``
    follows ``start_secs`` later, or ``SpeechFalseStart`` if it was not speech)."""

    t: float


@dataclass(frozen=True, slots=True)
class SpeechFalseStart(Event):
    """What the VAD heard at the last ``SpeechOnset`` did not become speech."""

    t: float


@dataclass(frozen=True, slots=True)
class SpeechStopped(Event):
    """The VAD decided the user stopped; ``t`` is when the speech ended (not when the
    silence window closed, which is ``t + stop_secs``)."""

    t: float


@dataclass(frozen=True, slots=True)
class SpeechPausing(Event):
    """The user has been silent for ``pause_secs``, less than the stop window: a pause
    may be starting. Not a stop: ``SpeechStopped(t)`` follows when the window closes, or
    the speech goes on and a later stop has a later ``t``. ``t`` is when the speech
    ended, as in ``SpeechStopped``. The words and the end-of-turn model are asked now,
    on speculation, so their answers are in when the stop comes."""

    t: float


@dataclass(frozen=True, slots=True)
class AudioIdle(Event):
    """Audio stopped arriving while the user was speaking (e.g. mic muted mid-speech)."""

    t: float


# -- transcription -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transcription(Event):
    """Text heard from the user. ``final`` transcripts go into the context. ``language``:
    the one the STT reports it in (ISO 639-1), if it says."""

    text: str
    t: float
    final: bool = True
    user_id: str = ""
    language: str | None = None


@dataclass(frozen=True, slots=True)
class TurnEndScore(Event):
    """The end-of-turn model's probability that the user's turn is complete, scored on
    the turn's audio up to the pause whose speech ended at ``speech_end`` (the
    ``SpeechStopped.t`` it answers); ``t`` is when the score arrived."""

    t: float
    probability: float
    speech_end: float


# -- user turns (from the turn controller) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class UserTurnStarted(Event):
    """A user turn began. ``interrupt`` asks the session to cancel the bot turn."""

    t: float
    strategy: str
    interrupt: bool = False


@dataclass(frozen=True, slots=True)
class UserTurnStopped(Event):
    """The user's turn is over: time to answer."""

    t: float
    strategy: str


@dataclass(frozen=True, slots=True)
class UserTurnEndPredicted(Event):
    """The user's turn will probably end soon (a stop strategy's forecast): an answer may
    be prepared now and held until the turn really stops."""

    t: float
    strategy: str


@dataclass(frozen=True, slots=True)
class UserTurnDiscarded(Event):
    """The user's turn is over and was no turn at all (a backchannel, a cough, the bot's
    own echo): nothing of it goes into the context and nothing answers it."""

    t: float
    text: str = ""


@dataclass(frozen=True, slots=True)
class UserSpeechDiscarded(Event):
    """Speech of the user's that made no turn, and why (one of
    :data:`pipeline.hearing.discards.REASONS`): a backchannel, the bot's echo, no words, muted,
    the STT failed, the call ended. ``text``: any words heard; ``onset``: when that speech began, if
    known. Reported by :class:`pipeline.hearing.discards.SpeechLedger`."""

    t: float
    reason: str
    text: str = ""
    onset: float | None = None


@dataclass(frozen=True, slots=True)
class UserTurnStopTimeout(Event):
    """No stop strategy fired within ``user_turn_stop_timeout``; the turn was ended."""

    t: float


@dataclass(frozen=True, slots=True)
class UserIdle(Event):
    """The user has said nothing for ``user_idle_timeout`` seconds."""

    t: float


@dataclass(frozen=True, slots=True)
class UserMuteStarted(Event):
    t: float


@dataclass(frozen=True, slots=True)
class UserMuteStopped(Event):
    t: float
