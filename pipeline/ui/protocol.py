"""The UI worker protocol: message data and the standard UI command payloads.

Five RTVI message types let the server observe and drive the client's GUI:

- ``ui-snapshot`` (client → server): an accessibility tree of the page, with refs;
- ``ui-event`` (client → server): an app-defined event (a click, a navigation);
- ``ui-cancel-job-group`` (client → server): stop the running jobs of a group;
- ``ui-command`` (server → client): do something in the page (toast, highlight, …);
- ``ui-job-group`` (server → client): the lifecycle of a group of jobs,
  ``group_started`` → ``job_update``* → ``job_completed`` x N → ``group_completed``.

These are data only; :mod:`server.rtvi.ui_worker` gives them behaviour. Snapshot models allow
extra fields so newer clients keep working; the command payloads are what the standard
client handlers understand (``model_dump(exclude_none=True)`` is the wire shape).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

UI_EVENT = "ui-event"
UI_SNAPSHOT = "ui-snapshot"
UI_CANCEL_JOB_GROUP = "ui-cancel-job-group"
UI_COMMAND = "ui-command"
UI_JOB_GROUP = "ui-job-group"
UI_CLIENT_TYPES = (UI_EVENT, UI_SNAPSHOT, UI_CANCEL_JOB_GROUP)
# Deeper snapshot trees are refused: no real screen needs more, and the tree is walked
# recursively.
MAX_TREE_DEPTH = 64


def now_ms() -> int:
    """Epoch milliseconds: the protocol's ``at`` and ``captured_at`` clock."""
    return int(time.time() * 1000)


# -- client → server --------------------------------------------------------------------


class UIEventData(BaseModel):
    """``ui-event``: ``event`` names what happened; ``payload`` is the app's."""

    event: str = Field(min_length=1, max_length=100)
    payload: Any | None = None


class A11yNode(BaseModel):
    """One element of the snapshot; ``ref`` is how the server refers to it later."""

    model_config = ConfigDict(extra="allow")

    ref: str
    role: str
    name: str | None = None
    value: str | None = None
    state: list[str] | None = None
    level: int | None = None
    colcount: int | None = None
    rowcount: int | None = None
    children: list[A11yNode] | None = None


class A11ySelection(BaseModel):
    """The user's text selection, on the element ``ref``."""

    model_config = ConfigDict(extra="allow")

    ref: str
    text: str
    start_offset: int | None = None
    end_offset: int | None = None


class A11ySnapshot(BaseModel):
    """The whole tree, when it was captured (epoch ms), and the selection."""

    model_config = ConfigDict(extra="allow")

    root: A11yNode
    captured_at: int
    selection: A11ySelection | None = None

    @model_validator(mode="after")
    def _not_too_deep(self) -> A11ySnapshot:
        level, depth = [self.root], 1
        while level:
            if depth > MAX_TREE_DEPTH:
                raise ValueError(f"the tree is deeper than {MAX_TREE_DEPTH} levels")
            level = [child for node in level for child in node.children or ()]
            depth += 1
        return self


class UISnapshotData(BaseModel):
    """``ui-snapshot``."""

    tree: A11ySnapshot


class UICancelJobGroupData(BaseModel):
    """``ui-cancel-job-group``: the group (``job_id``) to stop, and why."""

    job_id: str = Field(min_length=1)
    reason: str | None = None


# -- server → client ----------------------------------------------------------------------


class UICommandData(BaseModel):
    """``ui-command``: ``command`` and its payload (a plain dict on the wire)."""

    command: str
    payload: Any | None = None


class UIJobGroupStartedData(BaseModel):
    kind: Literal["group_started"] = "group_started"
    job_id: str
    workers: list[str] | None = None
    label: str | None = None
    cancellable: bool = True
    at: int = Field(default_factory=now_ms)


class UIJobUpdateData(BaseModel):
    kind: Literal["job_update"] = "job_update"
    job_id: str
    worker_name: str
    data: Any | None = None
    at: int = Field(default_factory=now_ms)


class UIJobCompletedData(BaseModel):
    kind: Literal["job_completed"] = "job_completed"
    job_id: str
    worker_name: str
    status: str
    response: Any | None = None
    at: int = Field(default_factory=now_ms)


class UIJobGroupCompletedData(BaseModel):
    kind: Literal["group_completed"] = "group_completed"
    job_id: str
    at: int = Field(default_factory=now_ms)


UIJobGroupData = (
    UIJobGroupStartedData | UIJobUpdateData | UIJobCompletedData | UIJobGroupCompletedData
)


# -- the standard command payloads --------------------------------------------------------


class _Target(BaseModel):
    """An element: by snapshot ``ref`` or by an id the client registered (fallback)."""

    ref: str | None = None
    target_id: str | None = None

    @model_validator(mode="after")
    def _needs_a_target(self) -> _Target:
        if self.ref is None and self.target_id is None:
            raise ValueError("give ref or target_id")
        return self


class Toast(BaseModel):
    """``toast``: a transient notification."""

    title: str
    subtitle: str | None = None
    description: str | None = None
    image_url: str | None = None
    duration_ms: int | None = Field(None, gt=0)


class Navigate(BaseModel):
    """``navigate``: show the app's view ``view`` (a route, tab or section)."""

    view: str
    params: dict[str, Any] | None = None


class Highlight(_Target):
    """``highlight``: briefly emphasize an element."""

    duration_ms: int | None = Field(None, gt=0)


class Focus(_Target):
    """``focus``: move input focus to an element."""


class Click(_Target):
    """``click``: click an element (the client ignores disabled ones)."""


class SelectText(_Target):
    """``select_text``: select an element's text, or the range [start, end) of it."""

    start_offset: int | None = Field(None, ge=0)
    end_offset: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> SelectText:
        start, end = self.start_offset, self.end_offset
        if start is not None and end is not None and end < start:
            raise ValueError("end_offset comes before start_offset")
        return self


class SetInputValue(_Target):
    """``set_input_value``: fill a text field (or choose a ``<select>`` option)."""

    value: str
