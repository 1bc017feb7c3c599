"""The tool registry: what the LLM may call, the JSON schema it sees, how a call is bound.

Handler convention (the only one): a tool is an ``async def`` (or a plain ``def``, which
runs in a worker thread) whose parameters *are* the tool's arguments, by name, plus an
optional keyword-only ``call: ToolCall`` that gives the call itself (id, raw arguments,
``result_callback`` for intermediate results), and optionally a parameter of type
:class:`pipeline.tools.call_context.CallContext` (any name) that gives the call's context
(its id, state, say, end the call, hand off)::

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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pipeline.tools.binding import Binding, ToolArgumentsError, ToolHandler, parse_docstring
from pipeline.tools.call import ResultSink, ToolCall

# The names other modules import from here: the tool vocabulary lives in one place.
__all__ = [
    "DEFAULT_TIMEOUT_SECS",
    "ReportLevel",
    "ResultSink",
    "ToolArgumentsError",
    "ToolCall",
    "ToolHandler",
    "ToolRegistry",
    "ToolSpec",
    "parse_docstring",
    "validate_tool_name",
]

DEFAULT_TIMEOUT_SECS = 10.0

# OpenAI's rule for function names; other providers accept a subset of it or the same.
_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
H = TypeVar("H", bound=ToolHandler)
# How much of a call the client is told: nothing but its id, its name, or everything.
ReportLevel = Literal["none", "name", "full"]


def validate_tool_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"invalid tool name {name!r}: must match ^[a-zA-Z0-9_-]{{1,64}}$")
    return name


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
    _binding: Binding | None = field(default=None, init=False, repr=False, compare=False)

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
        object.__setattr__(self, "_binding", Binding.of(self.handler, {}, require_hints=False))

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
            parameters = Binding.of(handler, docs, require_hints=True).schema()
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

    @property
    def in_thread(self) -> bool:
        """A plain ``def`` handler: the runner calls it in a worker thread, since a
        blocking call on the event loop would stall every session."""
        return self.handler is not None and not inspect.iscoroutinefunction(self.handler)

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

    def unregister(self, name: str) -> ToolSpec | None:
        """Remove a tool (a tool source that went away); the spec, or None."""
        return self._specs.pop(name, None)

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
