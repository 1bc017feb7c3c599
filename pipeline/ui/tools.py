"""LLM tools that drive the client's UI with the standard ``ui-command`` payloads.

The agent can show a toast, navigate to a view, and highlight, focus, click, select or
fill an element named by its ref in the ``<ui_state>`` it was given. Each tool sends one
command and answers at once (the client does not acknowledge commands); a ref that is not
in the newest snapshot, or a disabled element to click, is an error the LLM can read.

The tools are bound to one session's :class:`UICommands` (see :mod:`server.rtvi.ui_worker`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel

from pipeline.tools.registry import ToolSpec
from pipeline.ui.protocol import (
    Click,
    Focus,
    Highlight,
    Navigate,
    SelectText,
    SetInputValue,
    Toast,
)
from pipeline.ui.state import UIState

UI_TOOL_NAMES = frozenset(
    {
        "show_toast",
        "navigate",
        "highlight_element",
        "focus_element",
        "click_element",
        "select_text",
        "fill_field",
    }
)


class UICommands(Protocol):
    """What the tools need from a session's UI worker."""

    state: UIState

    def send_command(self, command: str, payload: BaseModel | Mapping[str, Any] | None) -> None: ...


class _UITools:
    """The UI tools' handlers, bound to one session's UI: each public method is one tool,
    whose name, docstring and signature are what the LLM is shown."""

    def __init__(self, ui: UICommands) -> None:
        self.ui = ui

    def _missing(self, ref: str, clickable: bool = False) -> dict[str, str] | None:
        """An error for the LLM when ``ref`` is not on screen (None: go ahead)."""
        if self.ui.state.snapshot is None:
            return None  # nothing to check against; the client ignores unknown refs
        node = self.ui.state.find(ref)
        if node is None:
            return {"error": f"no element [{ref}] on screen: use a ref from the <ui_state>"}
        if clickable and "disabled" in (node.state or ()):
            return {"error": f"[{ref}] is disabled"}
        return None

    async def show_toast(
        self, title: str, description: str | None = None, duration_ms: int | None = None
    ) -> dict[str, Any]:
        """Show a short notification (a toast) on the user's screen.

        Args:
            title: The headline, a few words.
            description: Optional body text.
            duration_ms: How long it stays, in milliseconds (default: a few seconds).
        """
        toast = Toast(title=title, description=description, duration_ms=duration_ms)
        self.ui.send_command("toast", toast)
        return {"shown": "toast", "title": title}

    async def navigate(self, view: str) -> dict[str, Any]:
        """Take the user to a view of the app (a page section, tab or route by its name).

        Args:
            view: The view's name: one of the view="..." names in the <ui_state>.
        """
        self.ui.send_command("navigate", Navigate(view=view))
        return {"navigated": view}

    async def highlight_element(self, ref: str, duration_ms: int | None = None) -> dict[str, Any]:
        """Briefly highlight an element on screen so the user sees what you mean.

        Args:
            ref: The element's ref from the <ui_state>, e.g. "e12".
            duration_ms: How long the highlight lasts, in milliseconds.
        """
        if error := self._missing(ref):
            return error
        self.ui.send_command("highlight", Highlight(ref=ref, duration_ms=duration_ms))
        return {"highlighted": ref}

    async def focus_element(self, ref: str) -> dict[str, Any]:
        """Move the keyboard focus to an element (e.g. a text field).

        Args:
            ref: The element's ref from the <ui_state>.
        """
        if error := self._missing(ref):
            return error
        self.ui.send_command("focus", Focus(ref=ref))
        return {"focused": ref}

    async def click_element(self, ref: str) -> dict[str, Any]:
        """Click a button, link, checkbox or other control for the user.

        Args:
            ref: The element's ref from the <ui_state>.
        """
        if error := self._missing(ref, clickable=True):
            return error
        self.ui.send_command("click", Click(ref=ref))
        return {"clicked": ref}

    async def select_text(
        self, ref: str, start_offset: int | None = None, end_offset: int | None = None
    ) -> dict[str, Any]:
        """Select text in an element to point the user at it: all of it, or a range.

        Args:
            ref: The element's ref from the <ui_state>.
            start_offset: First character to select (0-based); omit for all the text.
            end_offset: Character after the last one to select.
        """
        if error := self._missing(ref):
            return error
        payload = SelectText(ref=ref, start_offset=start_offset, end_offset=end_offset)
        self.ui.send_command("select_text", payload)
        return {"selected": ref}

    async def fill_field(self, ref: str, value: str) -> dict[str, Any]:
        """Type a value into a text field (or choose an option of a list) for the user.

        Args:
            ref: The field's ref from the <ui_state>.
            value: The text to put in the field.
        """
        if error := self._missing(ref, clickable=True):
            return error
        self.ui.send_command("set_input_value", SetInputValue(ref=ref, value=value))
        return {"filled": ref, "value": value}


def ui_tools(ui: UICommands) -> list[ToolSpec]:
    """The UI tools, bound to ``ui``."""
    tools = _UITools(ui)
    handlers = (
        tools.show_toast,
        tools.navigate,
        tools.highlight_element,
        tools.focus_element,
        tools.click_element,
        tools.select_text,
        tools.fill_field,
    )
    return [ToolSpec.from_function(handler) for handler in handlers]
