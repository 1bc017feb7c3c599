"""Job groups: async tool calls the client sees (and may stop) as one unit of work.

A group is a set of tool calls ("jobs") that run together. The client gets one
``ui-job-group`` message per step, always in this order::

    group_started → job_update* → job_completed x N → group_completed

Groups come from two places:

- an app calls :meth:`JobGroups.start` with the tools to run (e.g. three searches);
- the LLM asks for async tools (``cancel_on_interruption=False``) in one response: those
  calls become a group of their own (``auto_group``).

Every step is derived from the conversation's function-call events, which the emitter
delivers synchronously and in order, and each message goes out in the same step: that is
what guarantees the order. Intermediate results are ``job_update``; the final result is
``job_completed`` (status ``completed``, ``error`` or ``cancelled``); the last one is
followed at once by ``group_completed``.

:meth:`JobGroups.cancel` (``ui-cancel-job-group``) stops the group's running calls. An
async call's task is aborted and its final result says so through the async-tool
protocol (``{"status": "cancelled", ...}`` in a ``status=finished`` developer message);
an ordinary call is cancelled as on a barge-in (its result becomes ``CANCELLED``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.events import (
    Emitter,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
)
from pipeline.ui.protocol import (
    UIJobCompletedData,
    UIJobGroupCompletedData,
    UIJobGroupData,
    UIJobGroupStartedData,
    UIJobUpdateData,
)

COMPLETED = "completed"
ERROR = "error"
CANCELLED = "cancelled"


class JobGroupError(Exception):
    """A request about a group that cannot be served (unknown, finished, not cancellable)."""


@dataclass
class Job:
    """One tool call of a group."""

    tool_call_id: str
    function_name: str
    worker_name: str
    cancellable_call: bool = True  # cancel_on_interruption: not an async tool
    done: bool = False
    status: str = ""


@dataclass
class JobGroup:
    job_id: str
    label: str | None
    cancellable: bool
    jobs: dict[str, Job] = field(default_factory=dict)  # by tool_call_id

    @property
    def running(self) -> list[Job]:
        return [job for job in self.jobs.values() if not job.done]


def worker_names(function_names: Sequence[str]) -> list[str]:
    """One name per job: the function's, numbered where a function runs more than once."""
    repeated = {n for n in function_names if function_names.count(n) > 1}
    seen: dict[str, int] = {}
    names = []
    for name in function_names:
        if name in repeated:
            seen[name] = seen.get(name, 0) + 1
            name = f"{name}-{seen[name]}"
        names.append(name)
    return names


def job_status(result: Any) -> str:
    """A final result's status as the client sees it."""
    if isinstance(result, Mapping):
        if result.get("status") == CANCELLED:
            return CANCELLED
        if "error" in result:
            return ERROR
    return COMPLETED


class JobGroups:
    """The job groups of one conversation.

    ``send`` delivers ``ui-job-group`` data to the client; ``feed`` is the conversation's
    input (``Conversation.feed``); ``is_async`` tells whether a tool is an async tool;
    ``abort`` stops a running call's task without a result (``ToolRunner.abort``).
    """

    def __init__(
        self,
        send: Callable[[UIJobGroupData], None],
        feed: Callable[[Event], None],
        is_async: Callable[[str], bool],
        abort: Callable[[str], bool],
        auto_group: bool = True,
    ) -> None:
        self._send = send
        self._feed = feed
        self._is_async = is_async
        self._abort = abort
        self.auto_group = auto_group
        self._groups: dict[str, JobGroup] = {}
        self._by_call: dict[str, JobGroup] = {}

    def attach(self, events: Emitter) -> None:
        """Subscribe to the conversation's events; do it before the tool runner does."""
        events.on(FunctionCallsStarted, self.handle)
        events.on(FunctionCallInProgress, self.handle)
        events.on(FunctionCallResult, self.handle)
        events.on(FunctionCallCancelled, self.handle)

    @property
    def running(self) -> list[str]:
        """Ids of the groups still running."""
        return list(self._groups)

    def get(self, job_id: str) -> JobGroup | None:
        return self._groups.get(job_id)

    # -- starting ------------------------------------------------------------------------

    def start(
        self,
        jobs: Sequence[tuple[str, Mapping[str, Any]]],
        label: str | None = None,
        cancellable: bool = True,
    ) -> str:
        """Run ``jobs`` (tool name, arguments) as one group; returns its ``job_id``.

        The calls enter the context as if the LLM had asked for them, so their results
        (async-tool messages for async tools) are there for its next answer.
        """
        if not jobs:
            raise JobGroupError("a job group needs at least one job")
        job_id = secrets.token_hex(6)
        calls = tuple(
            FunctionCall(f"job_{job_id}_{i}", name, dict(arguments), group_id=job_id)
            for i, (name, arguments) in enumerate(jobs, 1)
        )
        self._open(job_id, calls, label, cancellable)
        self._feed(FunctionCallsStarted(calls))
        return job_id

    def _open(
        self, job_id: str, calls: Sequence[FunctionCall], label: str | None, cancellable: bool
    ) -> None:
        names = worker_names([c.function_name for c in calls])
        group = JobGroup(job_id, label, cancellable)
        for call, worker in zip(calls, names, strict=True):
            group.jobs[call.tool_call_id] = Job(call.tool_call_id, call.function_name, worker)
            self._by_call[call.tool_call_id] = group
        self._groups[job_id] = group
        self._send(UIJobGroupStartedData(job_id=job_id, workers=names, label=label,
                                         cancellable=cancellable))  # fmt: skip

    # -- following the calls -------------------------------------------------------------

    def handle(self, event: Event) -> None:
        match event:
            case FunctionCallsStarted(calls=calls):
                self._adopt(calls)
            case FunctionCallInProgress(call=call):
                job = self._job(call.tool_call_id)
                if job is not None:
                    job.cancellable_call = call.cancel_on_interruption
            case FunctionCallResult():
                self._result(event)
            case FunctionCallCancelled(tool_call_id=tool_call_id):
                self._finish(tool_call_id, CANCELLED, None)

    def _adopt(self, calls: Sequence[FunctionCall]) -> None:
        if not self.auto_group:
            return
        mine = [
            c
            for c in calls
            if c.tool_call_id not in self._by_call and self._is_async(c.function_name)
        ]
        if mine:
            job_id = mine[0].group_id or secrets.token_hex(6)
            label = ", ".join(dict.fromkeys(c.function_name for c in mine))
            self._open(job_id, mine, label, cancellable=True)

    def _job(self, tool_call_id: str) -> Job | None:
        group = self._by_call.get(tool_call_id)
        return group.jobs.get(tool_call_id) if group else None

    def _result(self, event: FunctionCallResult) -> None:
        job = self._job(event.tool_call_id)
        if job is None or job.done:
            return
        if not event.is_final:
            group = self._by_call[event.tool_call_id]
            update = UIJobUpdateData(
                job_id=group.job_id, worker_name=job.worker_name, data=event.result
            )
            self._send(update)
            return
        self._finish(event.tool_call_id, job_status(event.result), event.result)

    def _finish(self, tool_call_id: str, status: str, response: Any) -> None:
        group = self._by_call.get(tool_call_id)
        job = group.jobs.get(tool_call_id) if group else None
        if group is None or job is None or job.done:
            return
        job.done, job.status = True, status
        del self._by_call[tool_call_id]
        self._send(
            UIJobCompletedData(
                job_id=group.job_id,
                worker_name=job.worker_name,
                status=status,
                response=response,
            )
        )
        if not group.running:
            del self._groups[group.job_id]
            self._send(UIJobGroupCompletedData(job_id=group.job_id))

    # -- cancelling ----------------------------------------------------------------------

    def cancel(self, job_id: str, reason: str | None = None) -> int:
        """Stop the group's running jobs; returns how many were stopped."""
        group = self._groups.get(job_id)
        if group is None:
            raise JobGroupError(f"no running job group {job_id!r}")
        if not group.cancellable:
            raise JobGroupError(f"job group {job_id!r} cannot be cancelled")
        running = group.running
        # The LLM answers once the group is over only if some job did deliver something
        # worth talking about; a group the user stopped outright needs no comment.
        delivered = any(job.status == COMPLETED for job in group.jobs.values())
        result = {"status": CANCELLED, "reason": reason or "cancelled by the user"}
        for job in running:
            if job.cancellable_call:
                self._feed(FunctionCallCancelled(job.tool_call_id, job.function_name))
            elif self._abort(job.tool_call_id):
                run_llm = None if delivered else False
                self._feed(FunctionCallResult(job.tool_call_id, job.function_name, result,
                                              is_final=True, run_llm=run_llm))  # fmt: skip
            else:
                # Not running in the runner (finished meanwhile, or never started): the
                # client still gets a complete lifecycle.
                self._finish(job.tool_call_id, CANCELLED, result)
        return len(running)
