"""The tool registry: schemas from hints and docstrings, explicit schemas, names, binding."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from pipeline.tools.builtin import default_registry, get_current_time
from pipeline.tools.registry import (
    ToolArgumentsError,
    ToolCall,
    ToolRegistry,
    ToolSpec,
    parse_docstring,
    validate_tool_name,
)


class Unit(Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Booking(BaseModel):
    """A table booking."""

    name: str
    guests: int = Field(ge=1, description="How many people")
    notes: str | None = None


def make_call(arguments: dict[str, Any] | None = None) -> ToolCall:
    return ToolCall("call_1", "tool", arguments or {}, lambda *_: None)


def titles(schema: Any) -> list[str]:
    """Every ``title`` keyword left anywhere in a schema (property names excluded)."""
    if isinstance(schema, list):
        return [t for s in schema for t in titles(s)]
    if not isinstance(schema, dict):
        return []
    found = ["title"] if "title" in schema else []
    for key, value in schema.items():
        if key == "properties":
            found += [t for v in value.values() for t in titles(v)]
        elif key != "title":
            found += titles(value)
    return found


# -- schemas derived from hints -----------------------------------------------------------


def test_schema_from_hints_and_docstring() -> None:
    registry = ToolRegistry()

    @registry.tool()
    async def get_weather(
        city: str,
        days: int = 1,
        threshold: float = 0.5,
        hourly: bool = False,
        hours: list[int] | None = None,
        mode: Literal["fast", "exact"] = "fast",
        unit: Unit = Unit.CELSIUS,
        country: str | None = None,
        *,
        call: ToolCall,
    ) -> dict[str, Any]:
        """Get the weather forecast
        for a city.

        Args:
            city: The city name,
                e.g. "Paris".
            days (int): How many days.
            unit: Temperature unit.

        Returns:
            The forecast.
        """
        return {}

    spec = registry.get("get_weather")
    assert spec is not None
    assert spec.description == "Get the weather forecast for a city."
    schema = spec.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["city"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert list(props) == [
        "city", "days", "threshold", "hourly", "hours", "mode", "unit", "country",
    ]  # fmt: skip
    assert "call" not in props, "the call object is not an argument"
    assert props["city"] == {"type": "string", "description": 'The city name, e.g. "Paris".'}
    assert props["days"] == {"type": "integer", "default": 1, "description": "How many days."}
    assert props["threshold"] == {"type": "number", "default": 0.5}
    assert props["hourly"] == {"type": "boolean", "default": False}
    assert props["hours"]["anyOf"] == [
        {"type": "array", "items": {"type": "integer"}},
        {"type": "null"},
    ]
    assert props["mode"] == {"type": "string", "enum": ["fast", "exact"], "default": "fast"}
    assert props["unit"]["$ref"] == "#/$defs/Unit"
    assert props["unit"]["description"] == "Temperature unit."
    assert schema["$defs"]["Unit"] == {"type": "string", "enum": ["celsius", "fahrenheit"]}
    assert props["country"]["default"] is None
    assert titles(schema) == [], "generated titles are noise for the LLM"


def test_annotated_description_wins_and_a_property_may_be_called_title() -> None:
    async def tag(
        title: Annotated[str, Field(description="From the annotation", max_length=20)],
        json: int = 0,
    ) -> None:
        """Tag something.

        Args:
            title: From the docstring.
        """

    spec = ToolSpec.from_function(tag)
    props = spec.parameters["properties"]
    assert list(props) == ["title", "json"], "names that clash with BaseModel still work"
    assert props["title"]["description"] == "From the annotation"
    assert props["title"]["maxLength"] == 20
    assert spec.bind({"title": "x", "json": 3}, make_call()) == {"title": "x", "json": 3}


def test_a_tool_without_arguments() -> None:
    async def ping() -> str:
        """Ping."""
        return "pong"

    spec = ToolSpec.from_function(ping)
    assert spec.parameters == {"type": "object", "properties": {}, "additionalProperties": False}
    assert spec.bind({}, make_call()) == {}


def test_single_pydantic_model_parameter() -> None:
    registry = ToolRegistry()

    @registry.tool(description="Book a table.")
    async def book_table(booking: Booking, *, call: ToolCall) -> str:
        return booking.name

    spec = registry.get("book_table")
    assert spec is not None
    assert spec.parameters == Booking.model_json_schema()
    call = make_call()
    kwargs = spec.bind({"name": "Ada", "guests": "2"}, call)
    assert kwargs == {"booking": Booking(name="Ada", guests=2), "call": call}
    with pytest.raises(ToolArgumentsError, match="guests"):
        spec.bind({"name": "Ada", "guests": 0}, call)


def test_explicit_schema_is_advertised_as_given() -> None:
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "Search terms"}},
        "required": ["query"],
    }
    registry = ToolRegistry()

    @registry.tool("web-search", description="Search the web.", parameters=schema)
    async def search(query, **options):  # type: ignore[no-untyped-def]
        return query

    spec = registry.get("web-search")
    assert spec is not None and spec.parameters is schema
    assert spec.bind({"query": "x", "lang": "fr"}, make_call()) == {"query": "x", "lang": "fr"}
    with pytest.raises(ToolArgumentsError, match="missing required arguments: query"):
        spec.bind({"lang": "fr"}, make_call())


def test_register_an_explicit_spec() -> None:
    async def lookup(order_id: str) -> dict[str, str]:
        return {"status": "shipped"}

    registry = ToolRegistry()
    spec = registry.register(
        ToolSpec(
            name="lookup_order",
            description="Look up an order.",
            parameters={"type": "object", "properties": {"order_id": {"type": "string"}}},
            handler=lookup,
            timeout=3,
            cancel_on_interruption=False,
            run_llm=False,
        )
    )
    assert registry.get("lookup_order") is spec and "lookup_order" in registry
    assert (spec.timeout, spec.cancel_on_interruption, spec.run_llm) == (3, False, False)
    with pytest.raises(ToolArgumentsError):
        spec.bind({"order_id": "1", "extra": True}, make_call())  # the handler takes no extras


def test_defaults() -> None:
    async def noop() -> None:
        pass

    spec = ToolSpec.from_function(noop)
    assert spec.description == ""
    assert (spec.timeout, spec.cancel_on_interruption, spec.run_llm, spec.client_side) == (
        10.0, True, None, False,
    )  # fmt: skip


# -- names and registration --------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "has space", "dots.not.allowed", "x" * 65, "ünïcode"])
def test_invalid_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        validate_tool_name(name)

    async def handler() -> None:
        pass

    with pytest.raises(ValueError, match="invalid tool name"):
        ToolRegistry().tool(name)(handler)


@pytest.mark.parametrize("name", ["a", "get_time", "web-search", "A9", "x" * 64])
def test_valid_names(name: str) -> None:
    assert validate_tool_name(name) == name


def test_duplicate_names_are_rejected() -> None:
    registry = ToolRegistry()

    async def f() -> None:
        pass

    registry.tool("same")(f)
    with pytest.raises(ValueError, match="already registered"):
        registry.tool("same")(f)


def test_handlers_that_do_not_fit_the_convention_are_rejected() -> None:
    registry = ToolRegistry()

    def blocking(x: int) -> int:
        return x

    async def untyped(x):  # type: ignore[no-untyped-def]
        return x

    async def star(*values: int) -> None:
        pass

    with pytest.raises(TypeError, match="needs a type hint"):
        registry.tool()(untyped)
    with pytest.raises(TypeError, match="by name"):
        registry.tool()(star)
    with pytest.raises(TypeError, match="parentheses"):
        registry.tool(star)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="object schema"):
        registry.tool("arr", parameters={"type": "array"})(star)
    assert len(registry) == 0
    # A plain def is a tool too: the runner calls it in a worker thread.
    registry.tool()(blocking)
    spec = registry.get("blocking")
    assert spec is not None and spec.in_thread


def test_client_side_tools_need_no_handler() -> None:
    spec = ToolSpec(
        "show_map", "Show a map.", {"type": "object", "properties": {}}, client_side=True
    )
    assert spec.handler is None
    with pytest.raises(ValueError, match="needs a handler"):
        ToolSpec("server_tool", "", {"type": "object", "properties": {}})


def test_openai_tools_format() -> None:
    registry = default_registry(demo_tools=True)
    tools = registry.openai_tools()
    assert [t["function"]["name"] for t in tools] == ["get_current_time", "research_topic"]
    for tool in tools:
        assert set(tool) == {"type", "function"} and tool["type"] == "function"
        assert set(tool["function"]) == {"name", "description", "parameters"}
        assert tool["function"]["description"]
    json.dumps(tools)  # plain JSON, ready for the request
    time_params = tools[0]["function"]["parameters"]
    assert time_params["properties"]["timezone"]["default"] == "UTC"
    assert "required" not in time_params
    assert tools[1]["function"]["parameters"]["required"] == ["topic"]
    assert registry.get("research_topic").cancel_on_interruption is False  # type: ignore[union-attr]


# -- argument validation -------------------------------------------------------------------


async def _weather(city: str, days: int = 1, unit: Unit = Unit.CELSIUS) -> None:
    pass


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required arguments: city"),
        ({"city": "Paris", "days": "soon"}, "days: Input should be a valid integer"),
        ({"city": "Paris", "unit": "kelvin"}, "unit: Input should be 'celsius' or 'fahrenheit'"),
        ({"city": "Paris", "country": "FR"}, "country: Extra inputs are not permitted"),
        ({"city": 12}, "city: Input should be a valid string"),
        ("Paris", "arguments: Input should be a valid dictionary"),
    ],
)
def test_invalid_arguments_raise_a_readable_error(arguments: Any, message: str) -> None:
    spec = ToolSpec.from_function(_weather)
    with pytest.raises(ToolArgumentsError) as error:
        spec.bind(arguments, make_call())
    assert message in str(error.value)
    assert "https://" not in str(error.value), "no links to pydantic docs for the LLM"


def test_valid_arguments_are_converted_and_defaults_filled() -> None:
    spec = ToolSpec.from_function(_weather)
    assert spec.bind({"city": "Paris", "days": "3", "unit": "fahrenheit"}, make_call()) == {
        "city": "Paris",
        "days": 3,
        "unit": Unit.FAHRENHEIT,
    }
    assert spec.bind({"city": "Oslo"}, make_call()) == {
        "city": "Oslo",
        "days": 1,
        "unit": Unit.CELSIUS,
    }


# -- the call object and helpers ------------------------------------------------------------


async def test_call_reports_one_final_result_and_drops_the_rest() -> None:
    reported: list[tuple[Any, bool, bool | None]] = []
    call = ToolCall("c", "t", {}, lambda *args: reported.append(args))
    await call.result_callback({"p": 1}, is_final=False)
    await call.result_callback({"done": True}, run_llm=False)
    assert call.finished
    await call.result_callback({"late": True}, is_final=False)
    await call.result_callback("again")
    assert reported == [({"p": 1}, False, None), ({"done": True}, True, False)]


def test_parse_docstring() -> None:
    doc = """Do a thing.

    More words.

    Arguments:
        alpha: First
            and more.
        beta (list[int]): Second.

    Raises:
        ValueError: never an argument.
    """
    description, params = parse_docstring(doc)
    assert description == "Do a thing. More words."
    assert params == {"alpha": "First and more.", "beta": "Second."}
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("Note: only a line.") == ("Note: only a line.", {})


async def test_get_current_time() -> None:
    tokyo = await get_current_time("Asia/Tokyo")
    assert tokyo["timezone"] == "Asia/Tokyo" and tokyo["iso"].endswith("+09:00")
    utc = await get_current_time()
    assert utc["iso"].endswith("+00:00")
    for bad in ("Mars/Olympus_Mons", "", "../etc/passwd"):
        assert "unknown time zone" in (await get_current_time(bad))["error"]
