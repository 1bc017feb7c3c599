"""Parley's context as the provider's conversation: which remote items each local message
is, and the client events that bring the remote conversation in line before a response.

The local context is the source of truth: summaries, the context budget, a turn taken
back, an assistant message that holds only what was heard all happen there. Before each
response the mirror compares the context's messages with what it bound last time and
sends the difference: new messages become items (the user's committed audio and the last
response's own items are *bound*, not created again), vanished ones are deleted.

A message is known by its content and which occurrence of that content it is (two "yes"
turns are two messages). Leading system messages are the session's instructions, not
items. Async-tool messages follow the protocol of :mod:`pipeline.tools.async_protocol`:
``started`` sends nothing (the call stays open), ``intermediate`` cannot be streamed into
a realtime conversation and is counted in :attr:`Mirror.skipped`, ``final`` is the call's
``function_call_output``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from pipeline.realtime import wire
from pipeline.tools.async_protocol import parse_message

IN_PROGRESS = "IN_PROGRESS"  # a running call's placeholder (the assistant aggregator's)
Key = tuple[str, int]  # (content fingerprint, occurrence)


@dataclass
class ReplyItem:
    """One output item of a response: a spoken message or a function call."""

    item_id: str
    kind: str  # "message" or "function_call"
    call_id: str | None = None
    name: str | None = None  # a function call's (its arguments' event does not say)


@dataclass
class SyncPlan:
    """What to send before a response: the instructions and the item events."""

    instructions: str
    events: list[dict[str, Any]] = field(default_factory=list)


def new_item_id() -> str:
    return f"parley_{uuid.uuid4().hex[:20]}"  # the API allows client ids up to 32 chars


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict)).strip()
    return ""


def _keys(messages: list[dict[str, Any]]) -> list[Key]:
    seen: dict[str, int] = {}
    keys: list[Key] = []
    for message in messages:
        fingerprint = json.dumps(message, sort_keys=True, default=str)
        seen[fingerprint] = seen.get(fingerprint, -1) + 1
        keys.append((fingerprint, seen[fingerprint]))
    return keys


class Mirror:
    """One call's binding of local messages to remote items."""

    def __init__(self, dialect: wire.Dialect) -> None:
        self.dialect = dialect
        self._bound: dict[Key, list[str]] = {}
        self._audio_keys: set[Key] = set()  # user messages bound to committed audio
        self.pending_user: list[str] = []  # committed audio items not yet a message
        self._current_user: Key | None = None  # the last user message of the context
        self.pending_reply: list[ReplyItem] = []  # the last response's items
        self.skipped = 0  # intermediate async-tool results (not streamable)

    def reset(self) -> None:
        """A new connection: the provider's conversation is empty again."""
        self.__init__(self.dialect)  # type: ignore[misc]

    def plan(self, messages: list[dict[str, Any]]) -> SyncPlan:
        lead = 0
        while lead < len(messages) and messages[lead].get("role") == "system":
            lead += 1
        instructions = "\n\n".join(_text(m.get("content")) for m in messages[:lead])
        body = messages[lead:]
        keys = _keys(body)
        plan = SyncPlan(instructions)
        carried = self._drop_vanished(set(keys), plan)
        previous = "root"
        # Committed audio is the current turn's: the last user message (after a new
        # connection every earlier one is unsent too, and goes as text).
        users = [key for key, m in zip(keys, body, strict=True) if m.get("role") == "user"]
        self._current_user = users[-1] if users else None
        for key, message in zip(keys, body, strict=True):
            ids = self._bound.get(key)
            if ids is None:
                ids = self._bind(key, message, previous, carried, plan)
                self._bound[key] = ids
            if ids:
                previous = ids[-1]
        self.pending_user = carried + self.pending_user  # for the next user turn
        for item in self.pending_reply:  # a response nothing in the context answers to
            plan.events.append(wire.delete_item(item.item_id))
        self.pending_reply = []
        return plan

    def _drop_vanished(self, keys: set[Key], plan: SyncPlan) -> list[str]:
        """Delete the items of messages no longer in the context; a user message's audio
        is carried to the next new user message (a turn rewritten by a merge)."""
        carried: list[str] = []
        for key in [k for k in self._bound if k not in keys]:
            ids = self._bound.pop(key)
            if key in self._audio_keys:
                self._audio_keys.discard(key)
                carried.extend(ids)
                continue
            plan.events.extend(wire.delete_item(item_id) for item_id in ids)
        return carried

    def _bind(
        self,
        key: Key,
        message: dict[str, Any],
        previous: str,
        carried: list[str],
        plan: SyncPlan,
    ) -> list[str]:
        role = message.get("role")
        if role == "user" and key != self._current_user:
            text = _text(message.get("content"))
            return self._create(plan, previous, wire.message_item(self.dialect, "user", text))
        if role == "user":
            audio = carried + self.pending_user
            carried.clear()
            self.pending_user = []
            if audio:
                self._audio_keys.add(key)
                return audio
            text = _text(message.get("content"))
            return self._create(plan, previous, wire.message_item(self.dialect, "user", text))
        if role == "assistant":
            return self._assistant(message, previous, plan)
        if role in ("tool", "developer"):
            return self._tool_result(message, role, previous, plan)
        text = _text(message.get("content"))
        return self._create(plan, previous, wire.message_item(self.dialect, "system", text))

    def _assistant(self, message: dict[str, Any], previous: str, plan: SyncPlan) -> list[str]:
        """The last response's own items where they match (its spoken message for the
        text, its function calls by id; the context may split them over messages), new
        items for the rest."""
        calls = message.get("tool_calls") or []
        call_ids = {c.get("id") for c in calls}
        text = _text(message.get("content"))
        mine = [item for item in self.pending_reply
                if (item.kind == "message" and text) or item.call_id in call_ids]  # fmt: skip
        self.pending_reply = [item for item in self.pending_reply if item not in mine]
        ids = [item.item_id for item in mine]
        if text and not any(item.kind == "message" for item in mine):
            item = wire.message_item(self.dialect, "assistant", text)
            ids += self._create(plan, ids[-1] if ids else previous, item)
        bound = {item.call_id for item in mine}
        for call in calls:
            if call.get("id") in bound:
                continue
            function = call.get("function", {})
            created = wire.function_call_item(call.get("id", ""), function.get("name", ""),
                                              function.get("arguments", "{}"))  # fmt: skip
            ids += self._create(plan, ids[-1] if ids else previous, created)
        return ids

    def _tool_result(
        self, message: dict[str, Any], role: str, previous: str, plan: SyncPlan
    ) -> list[str]:
        payload = parse_message(message)
        if payload is not None:
            if payload.kind == "started":
                return []  # the call stays open until its final result
            if payload.kind == "intermediate":
                self.skipped += 1
                return []
            item = wire.function_output_item(payload.tool_call_id, payload.result or "")
            return self._create(plan, previous, item)
        if role == "developer":
            item = wire.message_item(self.dialect, "system", _text(message.get("content")))
            return self._create(plan, previous, item)
        output = _text(message.get("content"))
        if output == IN_PROGRESS:
            return []  # the call's result replaces it (a new message to the mirror)
        item = wire.function_output_item(message.get("tool_call_id", ""), output)
        return self._create(plan, previous, item)

    @staticmethod
    def _create(plan: SyncPlan, previous: str, item: dict[str, Any]) -> list[str]:
        item = {"id": new_item_id(), **item}
        plan.events.append(wire.create_item(item, previous))
        return [item["id"]]
