"""What an agent's tools and hooks get of the call they run in: its id, the data the client
sent to ``/start``, a state dict that lives as long as the call, and the few things an agent
may do to the call (say something, end it, send a UI command or a server message, hand it
to another agent).

The call's owner (the session) provides the doing through :class:`CallControls`. Every
method here may be called from the event loop or from a worker thread (plain ``def`` tools
and hooks run in one): off the loop, the call is handed to the loop, never run beside it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Protocol


class Agent(Protocol):
    """What a call's context knows of an agent (:class:`pipeline.tools.agent.Agent`; a protocol
    here because the agent's tools import this module)."""

    name: str
    instructions: str | None


class CallControls(Protocol):
    """What the session lets an agent do to its call (all run on the event loop)."""

    def say(self, text: str) -> None: ...

    def end_call(self, reason: str, goodbye: str | None) -> None: ...

    def send_ui_command(self, command: str, data: Any) -> None: ...

    def send_server_message(self, data: Any) -> None: ...

    def handoff(self, agent: Agent) -> None: ...


class CallContext:
    """One call, as its agent's tools and hooks see it.

    ``state`` is the agent's own: nothing else reads or writes it, and it is gone when the
    call ends. ``agent`` is the agent in charge now (it changes on a handoff).
    """

    def __init__(
        self,
        call_id: str,
        controls: CallControls,
        agent: Agent | None = None,
        request_data: Any = None,
        session_id: str | None = None,
    ) -> None:
        self.call_id = call_id
        self.session_id = session_id  # the /start id, when the call came through /start
        self.request_data = request_data
        self.state: dict[str, Any] = {}
        self.agent = agent
        self.ended = False
        self._controls = controls
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def say(self, text: str) -> None:
        """Speak ``text`` now (after what the bot is saying); it joins the context."""
        self._on_loop(self._controls.say, text)

    def end_call(self, goodbye: str | None = None, reason: str = "ended by the agent") -> None:
        """Hang up: once ``goodbye`` (if any) or the answer being spoken has been heard."""
        self.ended = True
        self._on_loop(self._controls.end_call, reason, goodbye)

    def send_ui_command(self, command: str, data: Any = None) -> None:
        """Send a UI command (``toast``, ``navigate``, ... or your client's own) to the page."""
        self._on_loop(self._controls.send_ui_command, command, data)

    def send_server_message(self, data: Any) -> None:
        """Send an RTVI ``server-message`` with ``data`` to the client."""
        self._on_loop(self._controls.send_server_message, data)

    def handoff(self, agent: Agent) -> None:
        """Give the rest of the call to ``agent``: its instructions and tools from the next
        LLM run on; the conversation so far stays in the context."""
        self.agent = agent
        self._on_loop(self._controls.handoff, agent)

    def _on_loop(self, action: Callable[..., None], *args: Any) -> None:
        if threading.get_ident() == self._loop_thread:
            action(*args)
        else:
            self._loop.call_soon_threadsafe(action, *args)
