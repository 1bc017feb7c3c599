"""From a tool handler to what the LLM sees, and back: the JSON schema derived from the
handler's type hints and Google-style docstring, and the LLM's arguments validated by
pydantic and mapped onto the handler's parameters (the conventions are described in
:mod:`pipeline.tools.registry`)."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from pipeline.tools.call import ToolCall
from pipeline.tools.call_context import CallContext

_CALL_PARAM = "call"
_SECTION = re.compile(r"(Args|Arguments|Parameters|Returns?|Raises|Yields|Examples?|Notes?):\s*")
_ARGS = re.compile(r"(Args|Arguments|Parameters):\s*")
_ARG_LINE = re.compile(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")

# ``async def`` or a plain ``def`` (the runner calls that one in a worker thread).
ToolHandler = Callable[..., Awaitable[Any] | Any]


class ToolArgumentsError(ValueError):
    """The LLM's arguments do not fit the tool; the message is meant for the LLM."""


class Binding:
    """Validates arguments with a pydantic model and maps them onto the handler."""

    def __init__(
        self,
        model: type[BaseModel],
        params: dict[str, str],
        whole: str | None,
        wants_call: bool,
        context_param: str | None = None,
    ) -> None:
        self.model = model
        self.params = params  # model field → handler parameter
        self.whole = whole  # the parameter that takes the whole model, if any
        self.wants_call = wants_call
        self.context_param = context_param  # the parameter typed CallContext, if any

    @classmethod
    def of(cls, handler: ToolHandler, docs: Mapping[str, str], require_hints: bool) -> Binding:
        name = getattr(handler, "__name__", "tool")
        try:
            hints = typing.get_type_hints(handler, include_extras=True)
        except NameError as exc:
            raise TypeError(f"tool {name}: cannot resolve type hints ({exc})") from exc
        wants_call = False
        var_keyword = False
        context_param: str | None = None
        args: list[inspect.Parameter] = []
        for param in inspect.signature(handler).parameters.values():
            if param.kind is param.KEYWORD_ONLY and param.name == _CALL_PARAM:
                wants_call = True
            elif _is_context(hints.get(param.name)):
                context_param = param.name  # given by the runner, never by the LLM
            elif param.kind is param.VAR_KEYWORD:
                var_keyword = True
            elif param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
                raise TypeError(f"tool {name}: arguments are passed by name, not *args or /")
            elif param.name not in hints and require_hints:
                raise TypeError(f"tool {name}: parameter {param.name!r} needs a type hint")
            else:
                args.append(param)
        if len(args) == 1 and not var_keyword:
            hint = hints.get(args[0].name)
            if isinstance(hint, type) and issubclass(hint, BaseModel):
                return cls(hint, {}, args[0].name, wants_call, context_param)
        fields: dict[str, Any] = {}
        params: dict[str, str] = {}
        for i, param in enumerate(args):
            hint = hints.get(param.name, Any)
            default = ... if param.default is param.empty else param.default
            # Internal field names with the real name as alias: a tool argument may be
            # called "json" or "_x" without clashing with BaseModel's own attributes.
            extra: dict[str, Any] = {}
            if param.name in docs and not _described(hint):
                extra["description"] = docs[param.name]  # an explicit None would erase it
            info = Field(default, alias=param.name, **extra)
            fields[f"a{i}"] = (hint, info)
            params[f"a{i}"] = param.name
        config = ConfigDict(extra="allow" if var_keyword else "forbid")
        model = create_model(f"{name}_arguments", __config__=config, **fields)
        return cls(model, params, None, wants_call, context_param)

    def schema(self) -> dict[str, Any]:
        schema = self.model.model_json_schema()
        return schema if self.whole else _without_titles(schema)

    def bind(self, arguments: Any, call: ToolCall) -> dict[str, Any]:
        try:
            validated = self.model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(_describe(exc)) from exc
        if self.whole:
            kwargs: dict[str, Any] = {self.whole: validated}
        else:
            kwargs = {param: getattr(validated, f) for f, param in self.params.items()}
            kwargs.update(validated.model_extra or {})
        if self.wants_call:
            kwargs[_CALL_PARAM] = call
        if self.context_param is not None:
            kwargs[self.context_param] = call.context
        return kwargs


def _is_context(hint: Any) -> bool:
    """A ``CallContext`` parameter (``CallContext | None`` too)."""
    if hint is CallContext:
        return True
    return any(arg is CallContext for arg in typing.get_args(hint))


def _described(hint: Any) -> bool:
    """``Annotated[T, Field(description=...)]`` already says what the argument is."""
    extras = typing.get_args(hint)[1:] if typing.get_origin(hint) is typing.Annotated else ()
    return any(isinstance(x, FieldInfo) and x.description for x in extras)


def _describe(error: ValidationError) -> str:
    parts = []
    for e in error.errors(include_url=False):
        where = ".".join(str(p) for p in e["loc"]) or "arguments"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def _without_titles(schema: Any) -> Any:
    """Drop pydantic's generated ``title`` keywords: tokens the LLM gains nothing from.
    Property names (which may well be "title") and literal values are left alone."""
    if isinstance(schema, list):
        return [_without_titles(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs", "patternProperties"):
            out[key] = {k: _without_titles(v) for k, v in value.items()}
        elif key in ("default", "enum", "const", "examples"):
            out[key] = value
        else:
            out[key] = _without_titles(value)
    return out


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """A Google-style docstring's description (the text before its first section) and
    its ``Args:`` entries, continuation lines joined."""
    lines = inspect.cleandoc(doc or "").splitlines()
    sections = [i for i, line in enumerate(lines) if _SECTION.fullmatch(line)]
    description = " ".join(" ".join(lines[: sections[0] if sections else None]).split())
    start = next((i for i in sections if _ARGS.fullmatch(lines[i])), None)
    params: dict[str, str] = {}
    if start is None:
        return description, params
    indent: int | None = None
    current = ""
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if depth == 0:
            break  # the next section
        match = _ARG_LINE.fullmatch(line.strip())
        if match and (indent is None or depth == indent):
            indent, current = depth, match.group(1)
            params[current] = match.group(2).strip()
        elif current:
            params[current] = f"{params[current]} {line.strip()}".strip()
    return description, params
