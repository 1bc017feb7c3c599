"""The client's latest UI snapshot, and the compact ``<ui_state>`` view the LLM reads.

One :class:`UIState` per session keeps only the newest snapshot, pruned to ``max_nodes``
elements, so its size is bounded whatever the client sends. :meth:`UIState.render` turns
it into an indented outline, one element per line::

    <ui_state>
    - [e1] heading "Parley" level=1
    - [e4] region "Notes" view="notes"
      - [e5] textbox "Title" value="groceries" (focused)
      - [e6] button "Save note"
    focus: [e5] textbox "Title"
    selection: [e9] "two plus two"
    </ui_state>

Unnamed containers (``generic``, ``group``, ``none`` …) are left out and their children
moved up, names and values are cut at ``MAX_TEXT`` characters, and once ``max_chars`` is
reached the rest is summarized as a count: the whole outline stays within ``max_chars``.

Every piece of it comes from the page, so it is untrusted (see :mod:`pipeline.context.page_data`):
each piece is cleaned of control characters and of our delimiter tags, and the outline
reaches the LLM as a user-role page-data message, never a system one.
:meth:`UIState.refresh` keeps exactly one such message in the context, replaced before
each LLM run (copies never accumulate), just before the user's latest words: the user's
request is what the LLM reads last, and a turn taken back (:mod:`pipeline.turns.merge`)
has only its reply after it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pipeline.context.llm_context import LLMContext
from pipeline.context.page_data import PageDataMessage, clean, page_data
from pipeline.messages import Message, UserMessage
from pipeline.ui.protocol import UI_SNAPSHOT, A11yNode, A11ySnapshot

MAX_TEXT = 80
# Refs and roles are short in any real tree; longer ones are cut (the LLM cannot use a
# ref that long anyway).
MAX_REF = 64
MAX_ROLE = 40
# Room kept for the "… N more elements not shown" line.
_HIDDEN_LINE = 40
# Roles that only group other elements: without a name they say nothing to the LLM.
_SILENT_ROLES = frozenset({"generic", "group", "none", "presentation", "div", "span", "document"})
_HEADER = "The user's screen, as an outline. Refer to elements by their [ref] with the UI tools."


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    """Page text on one line: cleaned, whitespace collapsed, at most ``limit`` chars."""
    return clean(" ".join(clean(text).split()), limit)


def _quoted(text: str) -> str:
    return json.dumps(_cut(text), ensure_ascii=False)


class UIState:
    """The newest snapshot of one client, bounded, and its rendering for the LLM."""

    def __init__(self, max_nodes: int = 500, max_chars: int = 4000) -> None:
        self.max_nodes = max_nodes
        self.max_chars = max_chars
        self.snapshot: A11ySnapshot | None = None
        self.nodes = 0  # elements kept from the last snapshot
        self.dropped = 0  # elements pruned from it
        self._refs: dict[str, A11yNode] = {}
        self._message: Message | None = None

    # -- keeping the snapshot ------------------------------------------------------------

    def update(self, snapshot: A11ySnapshot) -> None:
        """Keep ``snapshot`` (pruned to ``max_nodes`` elements, depth first) as the newest."""
        budget = [self.max_nodes]
        total = [0]
        snapshot.root = self._prune(snapshot.root, budget, total)
        self.snapshot = snapshot
        self.nodes = self.max_nodes - budget[0]
        self.dropped = total[0] - self.nodes
        self._refs = {node.ref: node for node, _ in _walk(snapshot.root, 0)}

    def _prune(self, node: A11yNode, budget: list[int], total: list[int]) -> A11yNode:
        total[0] += 1
        budget[0] -= 1
        kept: list[A11yNode] = []
        for child in node.children or ():
            if budget[0] <= 0:
                total[0] += _count(child)
                continue
            kept.append(self._prune(child, budget, total))
        node.children = kept or None
        return node

    def find(self, ref: str) -> A11yNode | None:
        """The element ``ref`` of the newest snapshot, if it has one."""
        return self._refs.get(ref)

    # -- the LLM's view --------------------------------------------------------------------

    def render(self) -> str | None:
        """The ``<ui_state>`` text (at most ``max_chars``), or None before the first
        snapshot."""
        if self.snapshot is None:
            return None
        head = ["<ui_state>", _HEADER]
        tail = self._pinned_lines(self.max_chars - _size(head) - _HIDDEN_LINE - 12)
        tail.append("</ui_state>")
        budget = self.max_chars - _size(head) - _size(tail) - _HIDDEN_LINE
        outline: list[str] = []
        used = 0
        visible = list(_visible(self.snapshot.root, 0))
        for node, depth in visible:
            line = "  " * depth + "- " + _describe(node)
            used += len(line) + 1
            if used > budget:
                break
            outline.append(line)
        hidden = len(visible) - len(outline) + self.dropped
        if hidden:
            outline.append(f"… {hidden} more elements not shown")
        return "\n".join([*head, *outline, *tail])

    def _pinned_lines(self, room: int) -> list[str]:
        """Focus and selection, on lines of their own so that they survive a cut
        outline; as many as fit in ``room`` characters."""
        assert self.snapshot is not None
        lines: list[str] = []
        focused = next((n for n in self._refs.values() if "focused" in (n.state or ())), None)
        if focused is not None:
            lines.append(f"focus: [{_ref(focused.ref)}] {_role(focused.role)} "
                         f"{_quoted(focused.name or '')}")  # fmt: skip
        selection = self.snapshot.selection
        if selection is not None and selection.text.strip():
            lines.append(f"selection: [{_ref(selection.ref)}] {_quoted(selection.text)}")
        while lines and _size(lines) > room:
            lines.pop()
        return lines

    def refresh(self, context: LLMContext) -> None:
        """Replace the previous ``<ui_state>`` message with the current one, framed as
        page data, just before the user's latest words (at the end before any)."""
        old = self._message
        text = self.render()
        message = page_data(text, UI_SNAPSHOT) if text is not None else None

        def place(messages: list[Message]) -> list[Message]:
            kept = [m for m in messages if m is not old]
            if message is not None:
                kept.insert(_before_last_user_words(kept), message)
            return kept

        context.transform_messages(place)
        self._message = message


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def _before_last_user_words(messages: list[Message]) -> int:
    """The index of the last message holding words of the user, or the end if none."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if (
            isinstance(message, UserMessage)
            and not isinstance(message, PageDataMessage)
            and message.text_content()
        ):
            return index
    return len(messages)


def _ref(ref: str) -> str:
    return _cut(ref, MAX_REF)


def _role(role: str) -> str:
    return _cut(role, MAX_ROLE)


def _walk(node: A11yNode, depth: int) -> Iterator[tuple[A11yNode, int]]:
    yield node, depth
    for child in node.children or ():
        yield from _walk(child, depth + 1)


def _count(node: A11yNode) -> int:
    return sum(1 for _ in _walk(node, 0))


def _visible(node: A11yNode, depth: int) -> Iterator[tuple[A11yNode, int]]:
    """Elements worth a line, with their depth once silent containers are skipped."""
    silent = node.role in _SILENT_ROLES and not node.name
    if not silent:
        yield node, depth
    for child in node.children or ():
        yield from _visible(child, depth if silent else depth + 1)


def _describe(node: A11yNode) -> str:
    parts = [f"[{_ref(node.ref)}] {_role(node.role)}"]
    if node.name:
        parts.append(_quoted(node.name))
    if node.value:
        parts.append(f"value={_quoted(node.value)}")
    if node.level is not None:
        parts.append(f"level={node.level}")
    view = (node.model_extra or {}).get("view")
    if isinstance(view, str) and view:
        parts.append(f"view={_quoted(view)}")  # a name for the navigate tool
    if node.rowcount is not None or node.colcount is not None:
        parts.append(f"grid={node.rowcount or '?'}x{node.colcount or '?'}")
    if node.state:
        parts.append("(" + ", ".join(_cut(s, 20) for s in node.state[:6]) + ")")
    return " ".join(parts)
