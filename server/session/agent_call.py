"""One call's side of its agent: the :class:`~pipeline.tools.call_context.CallContext` its tools
and hooks get, what that context may do to the call (say, end, UI command, server message,
handoff), and the agent's hooks run at the call's start, after each user turn and at its
end. Hooks run as the session's tasks: a slow hook never holds up the audio, and one that
raises is logged (:meth:`pipeline.tools.agent.Agent.run_hooks`) while the call goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

from loguru import logger

from pipeline.events import UserTranscript
from pipeline.messages import SystemMessage
from pipeline.tools import call_context
from pipeline.tools.agent import Agent
from pipeline.tools.call_context import CallContext
from pipeline.turns.keypad import KeypadPressed
from server.rtvi.ui_worker import UIWorker
from server.session.voice import VoiceSession

# How long an agent's line (or its goodbye) may wait and play before the next step anyway.
SPEAK_LIMIT = 20.0
# How often a waiting line checks whether the bot has gone quiet.
QUIET_POLL = 0.05
# How long the agent's on_call_end hooks may run once the call has ended.
END_HOOKS_LIMIT = 5.0


class CallOwner(Protocol):
    """What the agent needs of the session that owns the call."""

    pc_id: str
    start_id: str | None
    request_data: Any
    voice: VoiceSession
    ui: UIWorker

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...

    def request_close(self, reason: str, error: str | None = None) -> None: ...

    def send_server_message(self, data: Any) -> None: ...


class AgentCall:
    """The agent's hooks and controls for one call (the session's ``CallControls``)."""

    def __init__(self, owner: CallOwner, agent: Agent | None) -> None:
        self.owner = owner
        self.context = CallContext(
            owner.pc_id,
            self,
            agent=agent,
            request_data=owner.request_data,
            session_id=owner.start_id,
        )
        self.root = agent  # the agent the call started with: its hooks hold for the call
        self._ending = False
        self._lines: asyncio.Queue[tuple[str | None, Callable[[], None] | None]] = asyncio.Queue()
        self._speaker: asyncio.Task[None] | None = None
        voice = owner.voice
        if voice.tools is not None:
            voice.tools.context = self.context
        events = voice.conversation.events
        if agent is not None:
            events.on(UserTranscript, self._user_turn)
            events.on(KeypadPressed, self._keypad)
            self._hooks("call-start", agent.call_start_hooks)

    @property
    def agent(self) -> Agent | None:
        # cast: the context holds the call's first agent or one a tool handed off to, each
        # a pipeline.tools.agent.Agent (the context types it by a protocol for import order).
        return cast("Agent | None", self.context.agent)

    # -- hooks -----------------------------------------------------------------------------

    def _chosen(self, kind: str) -> list[Callable[..., Any]]:
        """The hooks of ``kind`` ("call_end_hooks", ...): the first agent's, which hold for
        the whole call, then those of the agent in charge now (each function once)."""
        hooks: list[Callable[..., Any]] = []
        for agent in (self.root, self.agent):
            for hook in getattr(agent, kind, ()) if agent is not None else ():
                if hook not in hooks:
                    hooks.append(hook)
        return hooks

    def _hooks(self, name: str, hooks: list[Callable[..., Any]], *args: Any) -> None:
        agent = self.agent
        if agent is not None and hooks:
            self.owner.spawn(agent.run_hooks(hooks, self.context, *args), f"agent-{name}")

    def _user_turn(self, event: UserTranscript) -> None:
        if event.content.strip():
            self._hooks("user-turn", self._chosen("user_turn_hooks"), event.content)

    def _keypad(self, event: KeypadPressed) -> None:
        self._hooks("keypad", self._chosen("keypad_hooks"), event.digit)

    async def ended(self, reason: str) -> None:
        """The call has ended: the ``on_call_end`` hooks, bounded in time."""
        self.context.ended = True
        hooks = self._chosen("call_end_hooks")
        if self.agent is None or not hooks:
            return
        try:
            async with asyncio.timeout(END_HOOKS_LIMIT):
                await self.agent.run_hooks(hooks, self.context, reason)
        except TimeoutError:
            limit = END_HOOKS_LIMIT
            logger.warning("agent {}: on_call_end hooks took over {} s", self.agent.name, limit)

    # -- CallControls ----------------------------------------------------------------------

    def say(self, text: str) -> None:
        if text.strip():
            self._speak(text)

    def announce(self, text: str, then: Callable[[], None]) -> None:
        """Speak ``text`` before anything else the call says (a recording notice), then
        run ``then`` (the greeting) once it has been heard."""
        self._speak(text, then)

    def _speak(self, text: str | None, then: Callable[[], None] | None = None) -> None:
        """Queue ``text`` (None: nothing) to be spoken once the bot is quiet, then run
        ``then``: a bot turn is never cut, and the agent's lines keep their order."""
        self._lines.put_nowait((text, then))
        if self._speaker is None or self._speaker.done():
            self._speaker = self.owner.spawn(self._speak_lines(), "agent-say")

    async def _speak_lines(self) -> None:
        conversation = self.owner.voice.conversation
        while not self._lines.empty():
            text, then = self._lines.get_nowait()
            try:
                async with asyncio.timeout(SPEAK_LIMIT):
                    await self._quiet()
                    if text is not None:
                        conversation.say(text)
                        await self._quiet()
            except TimeoutError:
                logger.warning("call {}: the bot stayed busy; went on", self.owner.pc_id)
            if then is not None:
                then()

    async def _quiet(self) -> None:
        """Until no bot turn is generating or playing."""
        conversation = self.owner.voice.conversation
        await asyncio.sleep(0)  # a turn started by this very step shows as active
        # Polled: "quiet" is the turn *and* the track's playout, which share no one event.
        while conversation.bot_active:  # noqa: ASYNC110
            await asyncio.sleep(QUIET_POLL)

    def end_call(self, reason: str, goodbye: str | None) -> None:
        """Hang up once what the bot is saying, and then ``goodbye``, has been heard."""
        if self._ending:
            return
        self._ending = True
        text = goodbye if goodbye and goodbye.strip() else None
        self._speak(text, lambda: self._hang_up(reason))

    def _hang_up(self, reason: str) -> None:
        logger.info("call {}: the agent ended it ({})", self.owner.pc_id, reason)
        self.owner.request_close(reason)

    def send_ui_command(self, command: str, data: Any) -> None:
        self.owner.ui.send_command(command, data)

    def send_server_message(self, data: Any) -> None:
        self.owner.send_server_message(data)

    def handoff(self, agent: call_context.Agent) -> None:
        """From the next LLM run on: ``agent``'s instructions and tools; the conversation
        so far stays, so the new agent knows what was said."""
        # cast: what a tool hands the call to is a pipeline.tools.agent.Agent (see agent).
        new = cast(Agent, agent)
        voice = self.owner.voice
        previous = voice.agent_tools.agent if voice.agent_tools is not None else None
        self.context.agent = new
        if voice.agent_tools is not None:
            voice.agent_tools.agent = new
        context = voice.context
        if new.instructions is not None:
            messages = context.messages
            rest = messages[1:] if messages and isinstance(messages[0], SystemMessage) else messages
            context.set_messages([SystemMessage(new.instructions), *rest])
        if voice.registry is not None:
            context.set_tools(voice.registry.openai_tools())
        logger.info(
            "call {}: handed from agent {} to {}",
            self.owner.pc_id,
            previous.name if previous is not None else "-",
            new.name,
        )
