"""HTTP tools against a real HTTP server on 127.0.0.1 (Starlette under uvicorn in a
thread), called the way the LLM calls them: through a ToolRunner."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from pipeline.events import Event, FunctionCall, FunctionCallResult, FunctionCallsStarted
from pipeline.tools.registry import ToolRegistry
from pipeline.tools.runner import ToolRunner
from pipeline.tools.sources.config import HTTPToolConfig
from pipeline.tools.sources.http import MAX_BODY_BYTES, HTTPTools
from testkit.thread_server import serve_in_thread

SECRET = "s3cret-shop-token-42"
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city."},
        "days": {"type": "integer"},
    },
    "required": ["city"],
}
# 16 MB of "x" gzipped twice: a few hundred bytes on the wire (issue 42, item 5).
BOMB_MB = 16
BOMB = gzip.compress(gzip.compress(b"x" * (BOMB_MB * 2**20)))


def schema(*names: str, **more: Any) -> dict[str, Any]:
    """An object schema with these properties (any type)."""
    return {"type": "object", "properties": {name: {} for name in names}, **more}


# -- the endpoint ----------------------------------------------------------------------------


@dataclass
class Endpoint:
    """The server the tools call, and what it saw."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    # Bumped after every test: a hanging request ends then, not at server shutdown.
    generation: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def paths(self) -> list[str]:
        with self.lock:
            return [r["path"] for r in self.requests]

    def last(self) -> dict[str, Any]:
        with self.lock:
            return self.requests[-1]


async def bomb(request: Request) -> Response:
    return Response(BOMB, media_type="text/plain", headers={"Content-Encoding": "gzip, gzip"})


async def gzipped(request: Request) -> Response:
    body = gzip.compress(json.dumps({"sku": "BK-42", "in_stock": 4}).encode())
    return Response(body, media_type="application/json", headers={"Content-Encoding": "gzip"})


async def brotli(request: Request) -> Response:
    # Not brotli at all: the client must refuse the coding, not decode it.
    return Response(
        b"\x1b\x03\x00\xf8", media_type="text/plain", headers={"Content-Encoding": "br"}
    )


async def json_text(request: Request) -> Response:
    """The ``text`` the body names, as a JSON response."""
    return Response(json.loads(await request.body())["text"], media_type="application/json")


def _app(endpoint: Endpoint) -> Starlette:
    async def record(request: Request) -> dict[str, Any]:
        body = await request.body()
        seen = {
            "method": request.method,
            "path": request.url.path,
            "query": dict(request.query_params),
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body": body.decode(),
        }
        with endpoint.lock:
            endpoint.requests.append(seen)
        return seen

    async def echo(request: Request) -> Response:
        seen = await record(request)
        return JSONResponse({**seen, "json": json.loads(seen["body"]) if seen["body"] else None})

    async def text(request: Request) -> Response:
        await record(request)
        return PlainTextResponse("Sunny, 21 degrees.")

    async def status(request: Request) -> Response:
        seen = await record(request)
        code = int(request.path_params["code"])
        # A careless endpoint that echoes the credentials back in its error page.
        page = f"Oops. You sent Authorization: {seen['headers'].get('authorization')}. "
        return PlainTextResponse(page + "detail " * 200, status_code=code)

    async def hang(request: Request) -> Response:
        await record(request)
        generation = endpoint.generation
        deadline = time.monotonic() + 5
        while endpoint.generation == generation and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return PlainTextResponse("too late")

    async def huge(request: Request) -> Response:
        await record(request)
        return PlainTextResponse("x" * (16 * MAX_BODY_BYTES))

    async def redirect(request: Request) -> Response:
        await record(request)
        target = request.query_params["to"]
        return RedirectResponse(target, status_code=307)

    async def cookie(request: Request) -> Response:
        await record(request)
        response = JSONResponse({"ok": True})
        response.set_cookie("session", "caller-one")
        return response

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(
        routes=[
            Route("/echo", echo, methods=methods),
            Route("/text", text, methods=methods),
            Route("/status/{code}", status, methods=methods),
            Route("/hang", hang, methods=methods),
            Route("/huge", huge, methods=methods),
            Route("/bomb", bomb, methods=methods),
            Route("/json", json_text, methods=methods),
            Route("/gzipped", gzipped, methods=methods),
            Route("/brotli", brotli, methods=methods),
            Route("/redirect", redirect, methods=methods),
            Route("/cookie", cookie, methods=methods),
        ]
    )


@pytest.fixture(scope="module")
def server() -> Iterator[Endpoint]:
    endpoint = Endpoint()
    with serve_in_thread(_app(endpoint)) as url:
        endpoint.url = url
        yield endpoint
        endpoint.generation += 1


@pytest.fixture
def endpoint(server: Endpoint) -> Iterator[Endpoint]:
    with server.lock:
        server.requests.clear()
    yield server
    server.generation += 1  # release any request still hanging


# -- driving the tools -----------------------------------------------------------------------


def tool(name: str, url: str, **more: Any) -> HTTPToolConfig:
    return HTTPToolConfig(name=name, description=f"The {name} tool.", url=url, **more)


@dataclass
class Outcome:
    result: Any
    at: float  # seconds after the calls started


async def call_tools(
    configs: list[HTTPToolConfig],
    *calls: tuple[str, dict[str, Any]],
    environ: dict[str, str] | None = None,
) -> list[Outcome]:
    """Run the calls as one parallel group through a ToolRunner; the final results in
    the order of the calls."""
    tools = HTTPTools(configs, environ=environ or {})
    registry = ToolRegistry()
    for spec in tools.specs():
        registry.register(spec)
    loop = asyncio.get_running_loop()
    began = loop.time()
    outcomes: dict[str, Outcome] = {}

    def feed(event: Event) -> None:
        if isinstance(event, FunctionCallResult) and event.is_final:
            outcomes[event.tool_call_id] = Outcome(event.result, loop.time() - began)

    runner = ToolRunner(registry, feed)
    group = tuple(FunctionCall(f"c{i}", name, args) for i, (name, args) in enumerate(calls))
    try:
        runner.handle(FunctionCallsStarted(group))
        async with asyncio.timeout(5):
            while runner.running:
                await asyncio.sleep(0.005)
    finally:
        await runner.close()
        await tools.aclose()
    return [outcomes[f"c{i}"] for i in range(len(calls))]


async def call_one(config: HTTPToolConfig, arguments: dict[str, Any], **kw: Any) -> Any:
    (outcome,) = await call_tools([config], (config.name, arguments), **kw)
    return outcome.result


# -- requests and results --------------------------------------------------------------------


async def test_post_sends_the_arguments_as_json_and_the_json_reply_is_the_result(
    endpoint: Endpoint,
) -> None:
    parameters = schema("city", "days", "options")
    config = tool("weather", f"{endpoint.url}/echo", parameters=parameters)
    arguments = {"city": "Zürich", "days": 3, "options": {"metric": True}}
    result = await call_one(config, arguments)
    assert isinstance(result, dict), "a JSON response is parsed"
    assert result["method"] == "POST"
    assert result["json"] == arguments
    assert result["headers"]["content-type"] == "application/json"
    assert result["headers"]["user-agent"].startswith("parley")


async def test_get_sends_the_arguments_as_query_parameters(endpoint: Endpoint) -> None:
    parameters = schema("q", "limit", "exact", "tags", "page")
    config = tool("search", f"{endpoint.url}/echo?lang=en", method="get", parameters=parameters)
    arguments = {"q": "tides", "limit": 3, "exact": True, "tags": ["sea", "moon"], "page": None}
    result = await call_one(config, arguments)
    assert result["method"] == "GET"
    assert result["query"] == {
        "lang": "en",  # the URL's own query is kept
        "q": "tides",
        "limit": "3",
        "exact": "true",
        "tags": '["sea", "moon"]',
    }
    assert result["body"] == ""


async def test_delete_also_uses_the_query(endpoint: Endpoint) -> None:
    forget = tool("forget", f"{endpoint.url}/echo", method="DELETE", parameters=schema("id"))
    result = await call_one(forget, {"id": 7})
    assert (result["method"], result["query"], result["body"]) == ("DELETE", {"id": "7"}, "")


async def test_a_text_response_becomes_a_string_result(endpoint: Endpoint) -> None:
    result = await call_one(tool("forecast", f"{endpoint.url}/text"), {"city": "Oslo"})
    assert result == "Sunny, 21 degrees."


async def test_the_configured_query_wins_over_the_llms_arguments(endpoint: Endpoint) -> None:
    parameters = schema("lang", "q")
    url = f"{endpoint.url}/echo?lang=en&key=k1"
    config = tool("search", url, method="GET", parameters=parameters)
    result = await call_one(config, {"lang": "de", "key": "mine", "q": "tides"})
    assert result["query"] == {"lang": "en", "key": "k1", "q": "tides"}


async def test_only_the_schemas_properties_are_sent(endpoint: Endpoint) -> None:
    arguments = {"city": "Oslo", "days": 2, "admin": True, "callback": "http://elsewhere"}
    post = tool("weather", f"{endpoint.url}/echo", parameters=WEATHER_SCHEMA)
    get = tool("forecast", f"{endpoint.url}/echo", method="GET", parameters=WEATHER_SCHEMA)
    # The operator may allow more than the properties, explicitly.
    open_schema = {**WEATHER_SCHEMA, "additionalProperties": True}
    loose = tool("loose", f"{endpoint.url}/echo", parameters=open_schema)
    calls = [(name, arguments) for name in ("weather", "forecast", "loose")]
    posted, got, loosely = (o.result for o in await call_tools([post, get, loose], *calls))
    assert posted["json"] == {"city": "Oslo", "days": 2}
    assert got["query"] == {"city": "Oslo", "days": "2"}
    assert loosely["json"] == arguments


# -- headers and secrets ---------------------------------------------------------------------


async def test_header_variables_are_expanded_and_reach_the_server(endpoint: Endpoint) -> None:
    config = tool(
        "orders",
        f"{endpoint.url}/echo",
        headers={"Authorization": "Bearer ${SHOP_TOKEN}", "X-Shop": "${SHOP_ID}-eu"},
    )
    result = await call_one(config, {}, environ={"SHOP_TOKEN": SECRET, "SHOP_ID": "acme"})
    assert result["headers"]["authorization"] == f"Bearer {SECRET}"
    assert result["headers"]["x-shop"] == "acme-eu"


def test_a_missing_variable_refuses_construction_naming_it() -> None:
    config = tool(
        "orders", "https://shop.example/api", headers={"Authorization": "Bearer ${SHOP_TOKEN}"}
    )
    with pytest.raises(ValueError) as caught:
        HTTPTools([config], environ={"OTHER": "x"})
    message = str(caught.value)
    assert "orders" in message and "Authorization" in message and "SHOP_TOKEN" in message


def test_a_header_with_a_line_break_is_refused_without_showing_it() -> None:
    config = tool("orders", "https://shop.example/api", headers={"X-Key": "${KEY}"})
    with pytest.raises(ValueError, match="X-Key") as caught:
        HTTPTools([config], environ={"KEY": "abc\r\nInjected: yes"})
    assert "Injected" not in str(caught.value)


# -- failures become error results -----------------------------------------------------------


async def test_error_statuses_become_error_results_without_the_secret(endpoint: Endpoint) -> None:
    headers = {"Authorization": "Bearer ${SHOP_TOKEN}"}
    broken = tool("broken", f"{endpoint.url}/status/500", headers=headers)
    missing = tool("missing", f"{endpoint.url}/status/404", headers=headers)
    outcomes = await call_tools(
        [broken, missing], ("broken", {}), ("missing", {}), environ={"SHOP_TOKEN": SECRET}
    )
    server_error, not_found = (o.result for o in outcomes)
    assert set(server_error) == {"error"}
    assert "HTTP 500" in server_error["error"] and "Oops" in server_error["error"]
    assert "HTTP 404" in not_found["error"]
    for result in (server_error, not_found):
        assert SECRET not in result["error"], "the echoed credentials are scrubbed"
        assert len(result["error"]) < 500, "the body is cut short"
    assert sorted(endpoint.paths()) == ["/status/404", "/status/500"]  # run concurrently


async def test_a_closed_port_is_a_connection_error_result() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free, and nothing listens once closed
    result = await call_one(tool("offline", f"http://127.0.0.1:{port}/x"), {})
    assert "connect" in result["error"]


async def test_a_hanging_server_times_out_without_stalling_other_calls(endpoint: Endpoint) -> None:
    slow = tool("slow", f"{endpoint.url}/hang", timeout=0.5)
    quick = tool("quick", f"{endpoint.url}/echo", timeout=0.5, parameters=schema("n"))
    hung, *answered = await call_tools(
        [slow, quick], ("slow", {}), ("quick", {"n": 1}), ("quick", {"n": 2})
    )
    assert "timed out" in hung.result["error"]
    assert 0.45 < hung.at < 10  # its timeout, not a hang (generous: a loaded machine)
    assert [a.result["json"] for a in answered] == [{"n": 1}, {"n": 2}]
    assert max(a.at for a in answered) < hung.at, "the others did not wait for the hanging one"


async def test_a_huge_body_is_truncated_at_the_bound(endpoint: Endpoint) -> None:
    result = await call_one(tool("dump", f"{endpoint.url}/huge"), {})
    assert isinstance(result, str)
    body, _, note = result.rpartition("\n")
    assert body == "x" * MAX_BODY_BYTES
    assert "truncated" in note


async def test_a_gzip_bomb_is_cut_while_it_is_decoded(endpoint: Endpoint) -> None:
    assert len(BOMB) < 1000
    tracemalloc.start()
    try:
        result = await call_one(tool("bomb", f"{endpoint.url}/bomb"), {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    body, _, note = result.rpartition("\n")
    assert body == "x" * MAX_BODY_BYTES
    assert "truncated" in note
    # Decoded whole, the 16 MB would be held at least once (twice, as the code was).
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MB at the peak"


async def test_a_gzipped_body_is_decoded_and_only_gzip_is_asked_for(endpoint: Endpoint) -> None:
    result = await call_one(tool("stock", f"{endpoint.url}/gzipped"), {})
    assert result == {"sku": "BK-42", "in_stock": 4}
    echoed = await call_one(tool("echo", f"{endpoint.url}/echo"), {})
    assert echoed["headers"]["accept-encoding"] == "gzip"


async def test_an_encoding_it_cannot_decode_is_an_error_result(endpoint: Endpoint) -> None:
    result = await call_one(tool("packed", f"{endpoint.url}/brotli"), {})
    assert set(result) == {"error"}
    assert "br" in result["error"] and "Content-Encoding" in result["error"]


async def test_json_nested_too_deep_is_given_as_text(endpoint: Endpoint) -> None:
    config = tool("raw", f"{endpoint.url}/json", parameters=schema("text"))
    past_the_parser = "[" * 5000 + "]" * 5000  # Python's json gives up at ~1,000 levels
    past_the_bound = "[" * 40 + "]" * 40
    shallow = '{"a": [[["fine"]]]}'
    outcomes = await call_tools(
        [config], *(("raw", {"text": text}) for text in (past_the_parser, past_the_bound, shallow))
    )
    assert [o.result for o in outcomes] == [past_the_parser, past_the_bound, {"a": [[["fine"]]]}]


# -- what the LLM sees -----------------------------------------------------------------------


async def test_the_llm_sees_the_schema_and_a_missing_argument_sends_nothing(
    endpoint: Endpoint,
) -> None:
    config = tool("weather", f"{endpoint.url}/echo", parameters=WEATHER_SCHEMA, timeout=4)
    tools = HTTPTools([config], environ={})
    try:
        (spec,) = tools.specs()
        assert spec.timeout == 4
        assert spec.openai_tool() == {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "The weather tool.",
                "parameters": WEATHER_SCHEMA,
            },
        }
    finally:
        await tools.aclose()
    result = await call_one(config, {"days": 2})
    assert "missing required arguments: city" in result["error"]
    assert endpoint.paths() == [], "no request was made"


# -- the wire --------------------------------------------------------------------------------


async def test_redirects_are_followed_within_the_origin_only(endpoint: Endpoint) -> None:
    here = tool("here", f"{endpoint.url}/redirect?to=/echo", parameters=schema("a"))
    result = await call_one(here, {"a": 1})
    assert result["json"] == {"a": 1}, "a 307 keeps the method and the body"
    # Same server, other host name: another origin, so the headers must not go there.
    elsewhere = endpoint.url.replace("127.0.0.1", "localhost")
    away = tool("away", f"{endpoint.url}/redirect?to={elsewhere}/echo", headers={"X-Key": "${KEY}"})
    result = await call_one(away, {}, environ={"KEY": SECRET})
    assert "HTTP 307" in result["error"] and "not followed" in result["error"]
    assert endpoint.paths() == ["/redirect", "/echo", "/redirect"]


async def test_cookies_do_not_carry_over_between_calls(endpoint: Endpoint) -> None:
    first = tool("first", f"{endpoint.url}/cookie")
    then = tool("then", f"{endpoint.url}/echo")
    tools = HTTPTools([first, then], environ={})
    try:
        set_cookie, echo = (spec.handler for spec in tools.specs())
        assert set_cookie is not None and echo is not None
        assert await set_cookie() == {"ok": True}
        seen = await echo()
    finally:
        await tools.aclose()
    assert "cookie" not in seen["headers"]
