"""One session's end of the UI worker protocol (see :mod:`pipeline.ui.protocol`).

- ``ui-snapshot``: the newest accessibility tree is kept (bounded) in :class:`UIState`;
  before each LLM run its ``<ui_state>`` outline replaces the previous one, just before
  the user's latest words, so the LLM can name elements by ref.
- ``ui-event``: goes to the app's handler for that event name (sync or async), and, with
  ``ui_events_to_llm``, into the context as a one-line note.
- ``ui-cancel-job-group``: stops a running job group (:mod:`pipeline.ui.job_groups`).
- ``ui-command``: :meth:`UIWorker.send_command` (standard payload models or any dict);
  the UI tools (:mod:`pipeline.ui.tools`) use it on the LLM's behalf.

Snapshots and events come from the page, so the LLM gets them as untrusted page data (a
framed, cleaned, bounded user-role message; :mod:`pipeline.context.page_data` says why), never
as system text.

UI tools are offered to LLMs that can call tools, per ``ui_tools``: ``on`` always, ``off``
never, ``auto`` (default) from the client's first ``ui-snapshot`` on, so an agent never
gets tools for a screen it cannot see. The ``<ui_state>`` goes with the tools.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any

from loguru import logger
from pydantic import BaseModel

from pipeline.context.llm_context import LLMContext
from pipeline.context.page_data import clean, clean_json, page_data
from pipeline.conversation import Conversation
from pipeline.messages import Message
from pipeline.tools.registry import ToolRegistry, ToolSpec
from pipeline.tools.runner import ToolRunner
from pipeline.ui.job_groups import JobGroupError, JobGroups
from pipeline.ui.protocol import (
    UI_CANCEL_JOB_GROUP,
    UI_COMMAND,
    UI_EVENT,
    UI_JOB_GROUP,
    UI_SNAPSHOT,
    UICancelJobGroupData,
    UICommandData,
    UIEventData,
    UIJobGroupData,
    UISnapshotData,
)
from pipeline.ui.state import UIState
from pipeline.ui.tools import ui_tools
from server.rtvi import protocol
from server.rtvi.protocol import RTVIError
from server.settings import Settings

# An app's handler for one ui-event name; it may be a plain function or a coroutine.
UIEventHandler = Callable[["UIWorker", UIEventData], Awaitable[None] | None]
# How much of an event's payload a context note keeps.
NOTE_PAYLOAD_CHARS = 300


def _event_note(data: UIEventData) -> Message:
    """A ``ui-event`` as a one-line page-data note for the LLM, cleaned and bounded."""
    payload = json.dumps(clean_json(data.payload), ensure_ascii=False, default=str)
    note = f"UI event {clean(data.event)!r}: {clean(payload, NOTE_PAYLOAD_CHARS)}"
    return page_data(note, UI_EVENT)


class SessionTools(ToolRegistry):
    """The shared tools, looked up live (tools added to them later count too), plus the
    tools of this session only (the UI tools, bound to it)."""

    def __init__(self, shared: ToolRegistry | None) -> None:
        super().__init__()
        self.shared = shared

    def register(self, spec: ToolSpec) -> ToolSpec:
        if self.shared is not None and spec.name in self.shared:
            raise ValueError(f"tool {spec.name} is already registered")
        return super().register(spec)

    def get(self, name: str) -> ToolSpec | None:
        own = super().get(name)
        if own is None and self.shared is not None:
            return self.shared.get(name)
        return own

    def openai_tools(self) -> list[dict[str, Any]]:
        return [spec.openai_tool() for spec in self]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[ToolSpec]:
        yield from self.shared or ()
        yield from super().__iter__()

    def __len__(self) -> int:
        return len(self.shared or ()) + super().__len__()


class UIWorker:
    """Serves one session's UI messages and sends its UI commands and job groups."""

    def __init__(
        self,
        settings: Settings,
        send: Callable[[dict[str, Any]], None],
        spawn: Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]],
        report: Callable[[RTVIError], None],
        event_handlers: Mapping[str, UIEventHandler] | None = None,
    ) -> None:
        self.settings = settings
        self.state = UIState(settings.ui_snapshot_max_nodes, settings.ui_state_max_chars)
        self.handlers: dict[str, UIEventHandler] = dict(event_handlers or {})
        self.jobs: JobGroups | None = None
        self.snapshots = 0
        self.events = 0
        self._send = send
        self._spawn = spawn
        self._report = report
        self._context: LLMContext | None = None
        self._registry: ToolRegistry | None = None
        self._own_registry: SessionTools | None = None  # made by tool_registry()
        self._offering = False  # the UI tools are registered and in the LLM's tool list

    # -- server → client -------------------------------------------------------------------

    def send_command(
        self, command: str, payload: BaseModel | Mapping[str, Any] | None = None
    ) -> None:
        """Send a ``ui-command``; pydantic payloads (e.g. ``Toast``) go as plain dicts."""
        if isinstance(payload, BaseModel):
            payload = payload.model_dump(exclude_none=True)
        data = UICommandData(command=command, payload=payload)
        self._send(protocol.message(UI_COMMAND, data.model_dump()))

    def _send_job_group(self, data: UIJobGroupData) -> None:
        self._send(protocol.message(UI_JOB_GROUP, data.model_dump()))

    def start_job_group(
        self,
        jobs: Sequence[tuple[str, Mapping[str, Any]]],
        label: str | None = None,
        cancellable: bool = True,
    ) -> str:
        """Run tools as one job group the client can follow and cancel; see
        :meth:`pipeline.ui.job_groups.JobGroups.start`."""
        if self.jobs is None:
            raise JobGroupError("this session runs no tools (the LLM cannot call tools)")
        return self.jobs.start(jobs, label, cancellable)

    # -- wiring (by the voice session) ------------------------------------------------------

    def tool_registry(self, base: ToolRegistry | None, can_call: bool) -> ToolRegistry | None:
        """The session's own registry: ``base``'s tools, and the UI tools once offered."""
        if not can_call or self.settings.ui_tools == "off":
            return base
        registry = self._own_registry = SessionTools(base)
        return registry

    def attach(
        self,
        context: LLMContext,
        conversation: Conversation,
        runner: ToolRunner | None,
        registry: ToolRegistry | None,
    ) -> None:
        """Connect to a conversation: tool list, ``<ui_state>`` before each LLM run, job
        groups. Call it before the tool runner attaches (job groups announce first)."""
        self._context = context
        self._registry = registry
        if self.settings.ui_tools == "on":
            self._offer()
        conversation.before_llm_run.append(self._before_llm_run)
        if runner is not None and registry is not None:

            def is_async(name: str) -> bool:
                spec = registry.get(name)
                return spec is not None and not spec.cancel_on_interruption and not spec.client_side

            self.jobs = JobGroups(
                self._send_job_group,
                conversation.feed,
                is_async,
                runner.abort,
                auto_group=self.settings.ui_job_groups,
            )
            self.jobs.attach(conversation.events)

    @property
    def tools_offered(self) -> bool:
        return self._offering

    def _offer(self) -> None:
        """Add the UI tools to this session's registry and to the LLM's tool list. Bound
        to this session, so built per session, and only for sessions that use them."""
        registry = self._registry
        if registry is not self._own_registry:
            return  # not a registry of our own: the LLM calls no tools, or UI tools are off
        if self._offering or self._context is None or registry is None:
            return
        specs = ui_tools(self)
        for spec in specs:
            registry.register(spec)
        # Appended to what the LLM is offered already (which may hold more than the
        # registry: e.g. the client's own tools).
        offered = [*(self._context.tools or ()), *(spec.openai_tool() for spec in specs)]
        self._context.set_tools(offered)
        self._offering = True

    def _before_llm_run(self) -> None:
        if self._context is not None and self.tools_offered:
            self.state.refresh(self._context)

    # -- client → server -------------------------------------------------------------------

    def handle(self, type_: str, msg_id: str, data: BaseModel) -> None:
        """Serve a validated UI client message; raises :class:`RTVIError` to refuse it."""
        if type_ == UI_SNAPSHOT and isinstance(data, UISnapshotData):
            self._snapshot(data)
        elif type_ == UI_EVENT and isinstance(data, UIEventData):
            self._event(msg_id, data)
        elif type_ == UI_CANCEL_JOB_GROUP and isinstance(data, UICancelJobGroupData):
            self._cancel(msg_id, data)
        else:
            raise RTVIError(f"unexpected {type_} data", msg_id)

    def _snapshot(self, data: UISnapshotData) -> None:
        self.state.update(data.tree)
        self.snapshots += 1
        if self.settings.ui_tools == "auto":
            self._offer()

    def _event(self, msg_id: str, data: UIEventData) -> None:
        self.events += 1
        if self.settings.ui_events_to_llm and self._context is not None:
            self._context.add_message(_event_note(data))
        handler = self.handlers.get(data.event)
        if handler is None:
            return
        try:
            outcome = handler(self, data)
        except Exception as exc:
            logger.exception("ui-event handler {!r} failed", data.event)
            raise RTVIError(f"ui-event {data.event!r} failed: {exc}", msg_id) from exc
        if inspect.isawaitable(outcome):
            self._spawn(self._finish(msg_id, data.event, outcome), f"ui-event-{data.event}")

    async def _finish(self, msg_id: str, event: str, outcome: Awaitable[None]) -> None:
        try:
            await outcome
        except Exception as exc:
            logger.exception("ui-event handler {!r} failed", event)
            self._report(RTVIError(f"ui-event {event!r} failed: {exc}", msg_id))

    def _cancel(self, msg_id: str, data: UICancelJobGroupData) -> None:
        if self.jobs is None:
            raise RTVIError("no job groups run in this session", msg_id)
        try:
            self.jobs.cancel(data.job_id, data.reason)
        except JobGroupError as exc:
            raise RTVIError(str(exc), msg_id) from None

    # -- reporting -----------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """For the session endpoint."""
        return {
            "snapshots": self.snapshots,
            "snapshot_nodes": self.state.nodes,
            "events": self.events,
            "tools_offered": self.tools_offered,
            "job_groups_running": self.jobs.running if self.jobs else [],
        }
