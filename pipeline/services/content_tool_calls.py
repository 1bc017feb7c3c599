"""Tool calls a model writes as JSON in its text, told apart from its spoken answer as it streams.

Small local models offered tools (Qwen2.5-Coder under llama.cpp) do not use their
template's ``<tool_call>`` tags: they write the call as JSON in the *content*, usually in
a ```` ```json ```` fence, sometimes bare, once with doubled braces, so llama.cpp leaves
``tool_calls`` empty. :class:`ContentToolCalls` is fed the content deltas and decides
from the first non-blank characters: an answer starting with ``{``, ``[``, a fence or a
``<tool`` tag is held (never spoken) and parsed when the stream ends; anything else
passes through at once, so a plain answer starts speaking with no added delay. A fence
or ``<tool_call>`` later in a spoken answer is held from there on.

Held text that opens like JSON but is not (``{laughs}``, a fence of Python) is released
as text as soon as that is clear. Held text that parses into calls becomes
:class:`~pipeline.services.llm.ToolCallRequest`\\ s (ids ``call_<hex>``); text after the
JSON is dropped (it guesses the result). A held attempt that cannot be read (broken
JSON, no name, arguments that are not an object) becomes a call of a tool whose name
says what was wrong (:func:`invalid_call`): no tool can have that name, so the tool runner
answers it with an ``{"error": "unknown tool ..."}`` result, the same path as a call of
a tool that does not exist, and the LLM can try again. Arguments that are an object but
do not fit the tool's schema go through as they are: the runner's validation answers
them with an error too. JSON is never spoken. :class:`DeltaToolCalls` joins the calls
the server did parse (a model that uses its template's tags), with the same checks.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import secrets
from typing import Any

from pipeline.services.llm import TextDelta, ToolCallRequest

# Where a held call may begin: only at the very start of the answer for bare JSON (a
# brace mid-sentence is ordinary text), anywhere for a fence or a tool tag.
_OPENERS_FIRST = ("{", "[", "```", "<tool")
_OPENERS_LATER = ("```", "<tool")
_FENCE = re.compile(r"```[ \t]*([\w-]*)[ \t]*\n?")
_TAG = re.compile(r"</?tool[\w-]*>")
_NAME = re.compile(r"""["']name["']\s*:\s*["']([^"']+)["']""")
_LONGEST_REASON = 120


def new_call_id() -> str:
    """An OpenAI-style tool-call id; unique enough to pair a call with its result."""
    return f"call_{secrets.token_hex(12)}"


def invalid_call(reason: str) -> ToolCallRequest:
    """A call that must fail: its name (with spaces, so no tool can have it) says why.

    The runner answers an unknown name with an error result, which the LLM reads and
    can recover from; this keeps unreadable calls on that path instead of speaking them.
    """
    return ToolCallRequest(new_call_id(), f"invalid tool call ({reason[:_LONGEST_REASON]})", {})


def call_from(name: Any, arguments: Any) -> ToolCallRequest:
    """One call from a name and its arguments (an object, a JSON string of one, or absent)."""
    if not isinstance(name, str) or not name.strip():
        return invalid_call("no tool name")
    name = name.strip()
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return invalid_call(f"the arguments of {name} are not valid JSON")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return invalid_call(f"the arguments of {name} are not a JSON object")
    return ToolCallRequest(new_call_id(), name, arguments)


def _calls_in(value: Any) -> list[ToolCallRequest]:
    """The calls a decoded JSON value holds, in the shapes models write them."""
    if isinstance(value, list):
        return [call for item in value for call in _calls_in(item)]
    if not isinstance(value, dict):
        return [invalid_call("a tool call must be a JSON object with a name")]
    if isinstance(value.get("tool_calls"), list):
        return _calls_in(value["tool_calls"])
    function = value.get("function")
    if isinstance(function, dict):
        value = function
    elif isinstance(function, str) and "name" not in value:
        value = {"name": function, **value}
    arguments = value.get("arguments", value.get("parameters"))
    return [call_from(value.get("name"), arguments)]


def _undoubled(text: str) -> str:
    """``{{"name": …}}}}`` → ``{"name": …}``: runs of braces collapsed, then the
    missing closers added back (outside strings), so nested objects survive."""
    text = re.sub(r"\{\{+", "{", re.sub(r"\}\}+", "}", text))
    return text + "}" * max(0, _open_braces(text))


def _open_braces(text: str) -> int:
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
    return depth


def _decode(text: str) -> Any:
    """The first JSON value in ``text`` (trailing text ignored), repaired if need be;
    raises ValueError when nothing readable is there."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ValueError("no JSON")
    body = text[start:]
    decoder = json.JSONDecoder()
    for candidate in (body, _undoubled(body)):
        try:
            return decoder.raw_decode(candidate)[0]
        except json.JSONDecodeError:
            pass
    try:  # a Python literal: single quotes, True/None
        return ast.literal_eval(body.strip().rstrip("`").strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ValueError("unreadable JSON") from None


def parse_calls(held: str) -> list[ToolCallRequest]:
    """Every call in held text: fenced blocks or tags one by one, else the text itself.

    Unreadable parts become :func:`invalid_call`\\ s; never returns an empty list.
    """
    stripped = held.strip()
    blocks = re.findall(r"```[ \t]*[\w-]*[ \t]*\n?(.*?)(?:```|$)", stripped, re.DOTALL)
    blocks = [b for b in blocks if b.strip()] or [stripped]
    calls: list[ToolCallRequest] = []
    for block in blocks:
        block = _TAG.sub("\n", block)
        try:
            calls.extend(_calls_in(_decode(block)))
        except ValueError:
            name = _NAME.search(block)
            about = f"for {name.group(1)} " if name else ""
            calls.append(invalid_call(f"the call {about}was not valid JSON"))
    return calls or [invalid_call("empty tool call")]


class ContentToolCalls:
    """Splits one answer's content deltas into spoken text and tool calls (see the module).

    :meth:`feed` returns what can go out now (text, at once when it is plain);
    :meth:`finish` returns what was held: the calls, or text that turned out not to be
    one. ``calls`` counts the calls returned so far.
    """

    def __init__(self) -> None:
        self._pending = ""  # text not yet released, or held as a possible call
        self._held = False
        self._spoke = False  # non-blank text has gone out
        self._in_code = False  # a released fence of code is open: its closer is text
        self._is_call: bool | None = None  # what the held text's start says
        self.calls = 0

    def feed(self, text: str) -> list[TextDelta]:
        """Text that can be spoken now (possibly empty)."""
        self._pending += text
        if self._held:
            return self._release_if_not_a_call()
        return self._scan()

    def finish(self) -> list[TextDelta | ToolCallRequest]:
        """At the end of the stream: the held calls, or the held text if it is no call."""
        pending, self._pending = self._pending, ""
        if not self._held:
            return [TextDelta(pending)] if pending else []
        calls = parse_calls(pending)
        self.calls += len(calls)
        return list(calls)

    def _scan(self) -> list[TextDelta]:
        """Release text up to a possible opener; hold from an opener on."""
        out: list[TextDelta] = []
        while self._pending and not self._held:
            openers = _OPENERS_LATER if self._spoke else _OPENERS_FIRST
            lead = len(self._pending) - len(self._pending.lstrip()) if not self._spoke else 0
            index = _first_possible(self._pending, openers, lead)
            if index is None:
                self._emit(self._pending, out)
                self._pending = ""
                break
            rest = self._pending[index:]
            if self._in_code and rest.startswith("```"):  # the code fence closes
                self._emit(self._pending[: index + 3], out)
                self._pending, self._in_code = rest[3:], False
                continue
            if any(rest.startswith(o) for o in openers):
                self._emit(self._pending[:index], out)
                self._pending, self._held, self._is_call = rest, True, None
                out += self._release_if_not_a_call()
                break
            if any(o.startswith(rest) for o in openers):  # an opener may be arriving
                self._emit(self._pending[:index], out)
                self._pending = rest
                break
            self._emit(self._pending[: index + 1], out)
            self._pending = self._pending[index + 1 :]
        return out

    def _emit(self, text: str, out: list[TextDelta]) -> None:
        if text:
            out.append(TextDelta(text))
            self._spoke = self._spoke or bool(text.strip())

    def _release_if_not_a_call(self) -> list[TextDelta]:
        """Held text that is clearly no call (``{laughs}``, a fence of code) goes back
        to being spoken."""
        if self._is_call is None:
            self._is_call = _looks_like_a_call(self._pending)
        if self._is_call is not False:
            return []
        self._held = False
        return self._scan_after_release()

    def _scan_after_release(self) -> list[TextDelta]:
        # The released opener itself is text now; what follows is scanned again.
        out: list[TextDelta] = []
        head_end = 1 if not self._pending.startswith("```") else 3
        self._in_code = head_end == 3
        self._emit(self._pending[:head_end], out)
        self._pending = self._pending[head_end:]
        return out + self._scan()


def _first_possible(text: str, openers: tuple[str, ...], start: int) -> int | None:
    """Index of the first character that may begin an opener: for bare JSON only the
    first non-blank one, for fences and tags any."""
    firsts = {o[0] for o in openers}
    if "{" in firsts:  # start of the answer: only its first non-blank character counts
        return start if start < len(text) and text[start] in firsts else None
    hits = [i for i in (text.find(c) for c in firsts) if i >= 0]
    return min(hits) if hits else None


def _looks_like_a_call(held: str) -> bool | None:
    """True or None (not yet known) while held text may still be a call; False once it
    clearly is not: a brace followed by a word, a fence of something other than JSON."""
    if held.startswith("<tool"):
        return True
    if held.startswith("```"):
        match = _FENCE.match(held)
        if match is None or not match.group(0).endswith("\n"):
            return None  # the fence's first line is still arriving
        body = held[match.end() :].lstrip()
        if not body:
            return None
        return body[0] in "{[<" or match.group(1).lower() in ("json", "tool_call")
    body = held[1:].lstrip()
    if not body:
        return None
    allowed = "\"'{}" if held[0] == "{" else "\"'{[]"
    return body[0] in allowed


class DeltaToolCalls:
    """Tool calls the server did parse (``delta.tool_calls`` dicts), joined by index: a
    model that does use its template's tags. Unreadable arguments fail as above."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, Any]] = {}

    def add(self, delta: dict[str, Any]) -> None:
        """One streamed fragment: id and name first, arguments in pieces."""
        index = delta.get("index")
        if not isinstance(index, int):
            index = len(self._calls) if delta.get("id") or not self._calls else max(self._calls)
        call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        call["id"] = delta.get("id") or call["id"]
        function = delta.get("function") or {}
        call["name"] += function.get("name") or ""
        call["arguments"] += function.get("arguments") or ""

    def requests(self) -> list[ToolCallRequest]:
        """The joined calls, in the order they began (the server's ids kept)."""
        out = []
        for _, raw in sorted(self._calls.items()):
            request = call_from(raw["name"], raw["arguments"])
            if raw["id"] and request.name == raw["name"]:
                request = dataclasses.replace(request, tool_call_id=raw["id"])
            out.append(request)
        return out
