"""The tool registry: what the LLM may call, the JSON schema it sees, how a call is bound.

Handler convention (the only one): a tool is an ``async def`` whose parameters *are* the
tool's arguments, by name, plus an optional keyword-only ``call: ToolCall`` that gives
the call itself (id, raw arguments, ``result_callback`` for intermediate results)::

    registry = ToolRegistry()

    @registry.tool(cancel_on_interruption=False, timeout=60)
    async def research_topic(topic: str, depth: int = 1, *, call: ToolCall) -> dict:
        '''Research a topic in the background.

        Args:
            topic: What to research.
            depth: How many rounds of searching.
        '''
        await call.result_callback({"progress": "halfway"}, is_final=False)
        return {"summary": "..."}

Returning is the final result. A falsy one (``None``, ``{}``, ``[]``, ``0``, ``""``)
becomes ``"COMPLETED"`` in the context and does not make the LLM answer again, whatever
``run_llm`` says: there is nothing new for it to read (the reference's rule). A handler
may instead report its final result itself with ``call.result_callback(result,
run_llm=...)``; anything reported after the final result, its return value included, is
dropped. A handler whose only argument is a pydantic model receives the whole arguments
object as that model.

Schemas: ``@registry.tool()`` derives the parameters from the type hints (str, int,
float, bool, list[...], Literal, Enum, Optional, ``Annotated[..., Field(...)]``; no
default means required) and the Google-style docstring (first part → description,
``Args:`` → parameter descriptions); a single pydantic-model parameter gives that model's
``model_json_schema()``. An explicit ``parameters=`` schema is advertised as given.

Validation: before the handler runs, the arguments are validated by pydantic against the
handler's signature (and, for an explicit schema, its ``required`` list). Failure raises
:class:`ToolArgumentsError`, which the runner turns into an error result for the LLM.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

DEFAULT_TIMEOUT_SECS = 10.0

# OpenAI's rule for function names; other providers accept a subset of it or the same.
_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_CALL_PARAM = "call"
_SECTION = re.compile(r"(Args|Arguments|Parameters|Returns?|Raises|Yields|Examples?|Notes?):\s*")
_ARGS = re.compile(r"(Args|Arguments|Parameters):\s*")
_ARG_LINE = re.compile(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")

ToolHandler = Callable[..., Awaitable[Any]]
H = TypeVar("H", bound=ToolHandler)
# (result, is_final, run_llm) → delivered to the conversation by the runner.
ResultSink = Callable[[Any, bool, bool | None], None]
# How much of a call the client is told: nothing but its id, its name, or everything.
ReportLevel = Literal["none", "name", "full"]


class ToolArgumentsError(ValueError):
    """The LLM's arguments do not fit the tool; the message is meant for the LLM."""


def validate_tool_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"invalid tool name {name!r}: must match ^[a-zA-Z0-9_-]{{1,64}}$")
    return name


class ToolCall:
    """One call of a tool, as its handler sees it."""

    def __init__(
        self,
        tool_call_id: str,
        function_name: str,
        arguments: dict[str, Any],
        sink: ResultSink,
        notify: Callable[[Any], None] | None = None,
    ) -> None:
        self.tool_call_id = tool_call_id
        self.function_name = function_name
        self.arguments = arguments  # as the LLM sent them, before validation
        self._sink = sink
        self._notify = notify
        self._finished = False

    @property
    def finished(self) -> bool:
        """The final result has been reported."""
        return self._finished

    async def result_callback(
        self, result: Any, *, is_final: bool = True, run_llm: bool | None = None
    ) -> None:
        """Report a result: intermediate (``is_final=False``, for async tools) or final.
        ``run_llm`` overrides whether the LLM answers once it is in the context (only
        for a truthy result: an empty one never makes it answer)."""
        if self._finished:
            return  # one final result per call; late reports would confuse the context
        self._finished = is_final
        self._sink(result, is_final, run_llm)

    def send_server_message(self, data: Any) -> None:
        """Push ``data`` to the client (RTVI ``server-message``), e.g. to show progress.
        Dropped when nobody listens (no client attached)."""
        if self._notify is not None:
            self._notify(data)


# -- binding: arguments → handler parameters ------------------------------------------------


class _Binding:
    """Validates arguments with a pydantic model and maps them onto the handler."""

    def __init__(
        self,
        model: type[BaseModel],
        params: dict[str, str],
        whole: str | None,
        wants_call: bool,
    ) -> None:
        self.model = model
        self.params = params  # model field → handler parameter
        self.whole = whole  # the parameter that takes the whole model, if any
        self.wants_call = wants_call

    @classmethod
    def of(cls, handler: ToolHandler, docs: Mapping[str, str], require_hints: bool) -> _Binding:
        name = getattr(handler, "__name__", "tool")
        try:
            hints = typing.get_type_hints(handler, include_extras=True)
        except NameError as exc:
            raise TypeError(f"tool {name}: cannot resolve type hints ({exc})") from exc
        wants_call = False
        var_keyword = False
        args: list[inspect.Parameter] = []
        for param in inspect.signature(handler).parameters.values():
            if param.kind is param.KEYWORD_ONLY and param.name == _CALL_PARAM:
                wants_call = True
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
                return cls(hint, {}, args[0].name, wants_call)
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
        return cls(model, params, None, wants_call)

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
        return kwargs


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


# -- specs and the registry -------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSpec:
    """One tool: what the LLM sees, the handler, and how its calls run.

    ``cancel_on_interruption=False`` makes it an async tool: it survives barge-ins and
    its results follow the async-tool protocol. ``run_llm`` is the default for its final
    result (None: the aggregator decides). ``client_side`` tools are executed by the
    client (RTVI), not by the server runner, and need no handler; their ``timeout`` is
    how long the client may take. ``report_level`` is how much of its calls the client
    sees (None: the session's default).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler | None = None
    timeout: float | None = DEFAULT_TIMEOUT_SECS
    cancel_on_interruption: bool = True
    run_llm: bool | None = None
    client_side: bool = False
    report_level: ReportLevel | None = None
    _binding: _Binding | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate_tool_name(self.name)
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name}: parameters must be an object schema")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"tool {self.name}: timeout must be positive or None")
        if self.handler is None:
            if not self.client_side:
                raise ValueError(f"tool {self.name}: a server-side tool needs a handler")
            return
        if not inspect.iscoroutinefunction(self.handler):
            # Handlers run on the event loop; a blocking one would stall every session.
            raise TypeError(f"tool {self.name}: the handler must be an async def")
        object.__setattr__(self, "_binding", _Binding.of(self.handler, {}, require_hints=False))

    @classmethod
    def from_function(
        cls,
        handler: ToolHandler,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_SECS,
        cancel_on_interruption: bool = True,
        run_llm: bool | None = None,
        report_level: ReportLevel | None = None,
    ) -> ToolSpec:
        """A spec whose name, description and schema come from ``handler`` unless given."""
        doc_description, docs = parse_docstring(inspect.getdoc(handler))
        if parameters is None:
            parameters = _Binding.of(handler, docs, require_hints=True).schema()
        return cls(
            name=handler.__name__ if name is None else name,
            description=doc_description if description is None else description,
            parameters=parameters,
            handler=handler,
            timeout=timeout,
            cancel_on_interruption=cancel_on_interruption,
            run_llm=run_llm,
            report_level=report_level,
        )

    def bind(self, arguments: Any, call: ToolCall) -> dict[str, Any]:
        """The handler's keyword arguments; raises :class:`ToolArgumentsError`."""
        if self._binding is None:
            raise TypeError(f"tool {self.name} runs on the client")
        if isinstance(arguments, Mapping):
            missing = [k for k in self.parameters.get("required", ()) if k not in arguments]
            if missing:
                raise ToolArgumentsError(f"missing required arguments: {', '.join(missing)}")
        return self._binding.bind(arguments, call)

    def openai_tool(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolRegistry:
    """The tools one agent offers, by name."""

    def __init__(self) -> None:
        self._specs: dict[str, ToolSpec] = {}

    def register(self, spec: ToolSpec) -> ToolSpec:
        if spec.name in self._specs:
            raise ValueError(f"tool {spec.name} is already registered")
        self._specs[spec.name] = spec
        return spec

    def tool(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_SECS,
        cancel_on_interruption: bool = True,
        run_llm: bool | None = None,
        report_level: ReportLevel | None = None,
    ) -> Callable[[H], H]:
        """Register the decorated handler (see the module docstring); it is returned
        unchanged, so it can still be called directly."""
        if callable(name):
            raise TypeError("use @registry.tool() with parentheses")

        def decorate(handler: H) -> H:
            self.register(
                ToolSpec.from_function(
                    handler,
                    name=name,
                    description=description,
                    parameters=parameters,
                    timeout=timeout,
                    cancel_on_interruption=cancel_on_interruption,
                    run_llm=run_llm,
                    report_level=report_level,
                )
            )
            return handler

        return decorate

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def openai_tools(self) -> list[dict[str, Any]]:
        """Every tool in the chat-completions ``tools`` format, in registration order."""
        return [spec.openai_tool() for spec in self._specs.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)
