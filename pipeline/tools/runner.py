"""Runs the tools the LLM asked for, and feeds their results back into the conversation.

On :class:`FunctionCallsStarted` every call is announced (:class:`FunctionCallInProgress`,
with ``cancel_on_interruption`` from its spec) and then run as its own asyncio task, so
parallel calls run concurrently. All announcements go out before any result can: the
assistant aggregator must know every call of a group before it decides whether the
group is complete.

Each result goes back through ``feed`` as a :class:`FunctionCallResult`. Nothing the
LLM did wrong, and nothing a tool does wrong, ends the conversation: an unknown tool,
invalid arguments, an exception or a timeout become a final ``{"error": ...}`` result the
LLM can read and talk about.

:class:`FunctionCallCancelled` (emitted by the aggregator on an interruption) cancels a
cancellable call's task; from then on nothing more of that call is fed. Async tools
(``cancel_on_interruption=False``) are not cancelled: the context keeps waiting for their
final result, so they end at their timeout or at :meth:`ToolRunner.close`.

Results are always fed on the event loop: a plain ``def`` handler runs in a worker thread
(the agents' pool, :func:`pipeline.tools.agent.in_agent_thread`) and its return value comes back
to the loop before it is fed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from loguru import logger

from pipeline.events import (
    AppMessage,
    Emitter,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
)
from pipeline.task_cancel import cancel_and_wait
from pipeline.tools.agent import Agent, handoff_target, in_agent_thread
from pipeline.tools.call_context import CallContext
from pipeline.tools.registry import ToolArgumentsError, ToolCall, ToolRegistry, ToolSpec


def error_result(message: str) -> dict[str, str]:
    """The result the LLM gets when a call could not produce one."""
    return {"error": message}


class ToolRunner:
    """Executes server-side tool calls for one conversation."""

    def __init__(
        self,
        registry: ToolRegistry,
        feed: Callable[[Event], None],
        context: CallContext | None = None,
    ) -> None:
        self.registry = registry
        self._feed = feed
        self.context = context  # given to tools that ask for the call's context
        self._tasks: set[asyncio.Task[None]] = set()
        # Calls that may still report, by id: removed on their final result or when
        # cancelled, which is what keeps a cancelled call from feeding anything more.
        self._open: dict[str, tuple[FunctionCall, asyncio.Task[None]]] = {}
        self._closed = False

    def attach(self, events: Emitter) -> None:
        """Subscribe to the conversation's events (e.g. ``conversation.events``)."""
        events.on(FunctionCallsStarted, self.handle)
        events.on(FunctionCallCancelled, self.handle)

    def handle(self, event: Event) -> None:
        match event:
            case FunctionCallsStarted(calls=calls):
                self._start(calls)
            case FunctionCallCancelled(tool_call_id=tool_call_id):
                self._cancel(tool_call_id)

    @property
    def running(self) -> frozenset[str]:
        """Ids of the calls that have not delivered their final result."""
        return frozenset(self._open)

    async def close(self) -> None:
        """Session end: cancel every call and wait for the tasks to finish."""
        self._closed = True
        self._open.clear()
        await cancel_and_wait(self._tasks)

    # -- starting and cancelling ------------------------------------------------------

    def _start(self, calls: tuple[FunctionCall, ...]) -> None:
        if self._closed:
            return
        planned: list[tuple[FunctionCall, ToolSpec | None]] = []
        for call in calls:
            spec = self.registry.get(call.function_name)
            if spec is not None and spec.client_side:
                continue  # the client (RTVI) announces and answers these
            if call.tool_call_id in self._open or any(
                c.tool_call_id == call.tool_call_id for c, _ in planned
            ):
                logger.warning("tool call {} is already running", call.tool_call_id)
                continue
            cancellable = spec.cancel_on_interruption if spec is not None else True
            call = dataclasses.replace(call, cancel_on_interruption=cancellable)
            self._feed(FunctionCallInProgress(call))
            planned.append((call, spec))
        loop = asyncio.get_running_loop()
        for call, spec in planned:
            name = f"tool-{call.function_name}-{call.tool_call_id}"
            task = loop.create_task(self._run(call, spec), name=name)
            self._tasks.add(task)
            self._open[call.tool_call_id] = (call, task)
            task.add_done_callback(self._task_done)

    def _cancel(self, tool_call_id: str) -> None:
        entry = self._open.get(tool_call_id)
        if entry is None or not entry[0].cancel_on_interruption:
            return  # finished already, not ours, or an async tool (see module docstring)
        del self._open[tool_call_id]
        entry[1].cancel()

    def abort(self, tool_call_id: str) -> bool:
        """Stop a running call, async tools included, without feeding anything: the
        caller reports how it ended (a job group cancelled by the user). False if the
        call is not running."""
        entry = self._open.pop(tool_call_id, None)
        if entry is None:
            return False
        entry[1].cancel()
        return True

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        for tool_call_id, (_, open_task) in list(self._open.items()):
            if open_task is task:
                del self._open[tool_call_id]
        if not task.cancelled() and task.exception() is not None:
            logger.opt(exception=task.exception()).error("tool task {} failed", task.get_name())

    # -- one call ----------------------------------------------------------------------

    async def _run(self, call: FunctionCall, spec: ToolSpec | None) -> None:
        task = asyncio.current_task()
        assert task is not None

        def sink(result: Any, is_final: bool, run_llm: bool | None) -> None:
            self._report(call, task, result, is_final, run_llm)

        tool_call = ToolCall(
            call.tool_call_id,
            call.function_name,
            dict(call.arguments),
            sink,
            notify=lambda data: self._notify(task, call, data),
            context=self.context,
        )
        if spec is None:
            await tool_call.result_callback(error_result(f"unknown tool {call.function_name}"))
            return
        try:
            kwargs = spec.bind(call.arguments, tool_call)
        except ToolArgumentsError as exc:
            await tool_call.result_callback(
                error_result(f"invalid arguments for {spec.name}: {exc}")
            )
            return
        result, run_llm = await self._execute(spec, kwargs)
        handoff = handoff_target(result)
        if handoff is not None:
            result = self._hand_off(spec, *handoff)
        await tool_call.result_callback(result, run_llm=run_llm)

    def _hand_off(self, spec: ToolSpec, agent: Agent, result: Any) -> Any:
        """A tool returned an agent: the call is that agent's from the next LLM run on."""
        if self.context is None:
            return error_result(f"{spec.name} handed off, but this call has no agents")
        self.context.handoff(agent)
        logger.info("tool {} handed the call to agent {}", spec.name, agent.name)
        return result

    async def _execute(self, spec: ToolSpec, kwargs: dict[str, Any]) -> tuple[Any, bool | None]:
        """The handler's return value and ``run_llm``; errors leave ``run_llm`` to the
        aggregator, which runs the LLM so it can tell the user."""
        assert spec.handler is not None
        try:
            async with asyncio.timeout(spec.timeout) as deadline:
                if spec.in_thread:
                    # A timeout cannot stop the thread; it only stops waiting for it.
                    return await in_agent_thread(spec.handler, **kwargs), spec.run_llm
                return await spec.handler(**kwargs), spec.run_llm
        except TimeoutError as exc:
            if deadline.expired():
                logger.warning("tool {} timed out after {}s", spec.name, spec.timeout)
                return error_result(f"{spec.name} timed out after {spec.timeout:g}s"), None
            return self._failed(spec, exc), None
        except Exception as exc:
            return self._failed(spec, exc), None

    @staticmethod
    def _failed(spec: ToolSpec, exc: Exception) -> dict[str, str]:
        logger.opt(exception=exc).warning("tool {} failed", spec.name)
        return error_result(f"{spec.name} failed: {str(exc) or type(exc).__name__}")

    def _notify(self, task: asyncio.Task[Any], call: FunctionCall, data: Any) -> None:
        entry = self._open.get(call.tool_call_id)
        if entry is not None and entry[1] is task:  # a cancelled call stays quiet
            self._feed(AppMessage(data))

    def _report(
        self,
        call: FunctionCall,
        task: asyncio.Task[Any],
        result: Any,
        is_final: bool,
        run_llm: bool | None,
    ) -> None:
        # Keyed by task, not just id: a handler may report from tasks of its own, and a
        # reused id must not let a cancelled call's late report through.
        entry = self._open.get(call.tool_call_id)
        if entry is None or entry[1] is not task:
            return  # cancelled (or the session closed): the context has moved on
        if is_final:
            del self._open[call.tool_call_id]
        self._feed(
            FunctionCallResult(call.tool_call_id, call.function_name, result, is_final, run_llm)
        )
