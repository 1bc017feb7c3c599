"""The UI worker protocol: snapshots and <ui_state>, ui-events, ui-commands, UI tools,
bad payloads; unit tests and a real server driven by the aiortc client and the LLM stub."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.context.llm_context import LLMContext
from pipeline.conversation import Conversation
from pipeline.events import Emitter
from pipeline.messages import UserMessage
from pipeline.tools.registry import ToolRegistry, ToolSpec
from pipeline.tools.runner import ToolRunner
from pipeline.ui.job_groups import JobGroupError
from pipeline.ui.protocol import (
    A11ySnapshot,
    Toast,
    UICancelJobGroupData,
    UIEventData,
    UISnapshotData,
)
from pipeline.ui.state import UIState
from pipeline.ui.tools import UI_TOOL_NAMES, ui_tools
from server.api.app import create_app
from server.rtvi import protocol
from server.rtvi.protocol import RTVIError
from server.rtvi.ui_worker import UIWorker
from server.settings import Settings
from testkit.openai_stub import ChatReply, OpenAIStub
from testkit.openai_stub import ToolCall as StubToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess, free_port


def node(ref: str, role: str, name: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"ref": ref, "role": role, **({"name": name} if name else {}), **extra}


PAGE: dict[str, Any] = {
    "root": node(
        "e0",
        "document",
        "Parley",
        children=[
            node("e1", "heading", "Parley", level=1),
            node(
                "e2",
                "generic",
                children=[
                    node("e3", "textbox", "Title", value="groceries", state=["focused"]),
                    node("e4", "button", "Save note"),
                    node("e5", "button", "Delete", state=["disabled"]),
                ],
            ),
            node("e6", "paragraph", "What is two plus two?"),
            node("e7", "region", "Notes", view="notes"),
        ],
    ),
    "captured_at": 1_700_000_000_000,
    "selection": {"ref": "e6", "text": "two plus two", "start_offset": 8, "end_offset": 20},
}


def snapshot(tree: dict[str, Any] = PAGE) -> A11ySnapshot:
    return UISnapshotData.model_validate({"tree": json.loads(json.dumps(tree))}).tree


# -- the <ui_state> view --------------------------------------------------------------------


def test_ui_state_outline_has_refs_roles_names_state_and_selection() -> None:
    state = UIState()
    assert state.render() is None
    state.update(snapshot())
    text = state.render()
    assert text is not None
    lines = text.splitlines()
    assert lines[0] == "<ui_state>" and lines[-1] == "</ui_state>"
    assert '- [e0] document "Parley"' in lines
    assert '  - [e1] heading "Parley" level=1' in lines
    # The unnamed generic container is left out; its children move up a level.
    assert not any("[e2]" in line for line in lines)
    assert '  - [e3] textbox "Title" value="groceries" (focused)' in lines
    assert '  - [e5] button "Delete" (disabled)' in lines
    assert 'selection: [e6] "two plus two"' in lines
    assert 'focus: [e3] textbox "Title"' in lines
    assert '  - [e7] region "Notes" view="notes"' in lines
    assert state.find("e4") is not None and state.find("e99") is None


def test_ui_state_is_bounded_in_nodes_and_characters() -> None:
    items = [node(f"i{i}", "listitem", "x" * 200) for i in range(50)]
    many = {"root": node("r", "list", "big", children=items), "captured_at": 1}
    state = UIState(max_nodes=20, max_chars=600)
    state.update(snapshot(many))
    assert state.nodes == 20 and state.dropped == 31
    assert state.find("i18") is not None and state.find("i19") is None
    text = state.render()
    assert text is not None and len(text) <= 600 + 80
    assert "…" in text  # names are cut
    shown = sum(1 for line in text.splitlines() if "listitem" in line)
    assert f"… {51 - 1 - shown} more elements not shown" in text


def trees(max_leaves: int = 60) -> st.SearchStrategy[dict[str, Any]]:
    names = st.one_of(st.none(), st.text(max_size=120))
    roles = st.sampled_from(["button", "generic", "list", "listitem", "textbox", "group"])
    leaf = st.builds(lambda r, n: {"role": r, "name": n}, roles, names)

    def branch(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
        return st.builds(lambda r, n, c: {"role": r, "name": n, "children": c},
                         roles, names, st.lists(children, max_size=6))  # fmt: skip

    return st.recursive(leaf, branch, max_leaves=max_leaves)


def with_refs(tree: dict[str, Any]) -> dict[str, Any]:
    counter = iter(range(10**6))

    def number(n: dict[str, Any]) -> dict[str, Any]:
        out = {"ref": f"e{next(counter)}", "role": n["role"]}
        if n["name"] is not None:
            out["name"] = n["name"]
        if n.get("children"):
            out["children"] = [number(c) for c in n["children"]]
        return out

    return number(tree)


@settings(max_examples=60, deadline=None)
@given(trees(), st.integers(10, 80), st.integers(200, 3000))
def test_any_tree_renders_within_its_bounds(
    tree: dict[str, Any], max_nodes: int, max_chars: int
) -> None:
    state = UIState(max_nodes=max_nodes, max_chars=max_chars)
    state.update(snapshot({"root": with_refs(tree), "captured_at": 1}))
    assert state.nodes <= max_nodes
    text = state.render()
    assert text is not None
    # The budget holds but for the closing lines (the count and the closing tag).
    body = text.rsplit("\n", 2)[0] if "more elements" in text else text.rsplit("\n", 1)[0]
    assert len(body) <= max_chars
    for line in text.splitlines():
        if line.lstrip().startswith("- ["):
            ref = line.split("[", 1)[1].split("]", 1)[0]
            assert state.find(ref) is not None, line
            assert len(line) < 2 * 80 + 200  # names are cut


def test_refresh_keeps_one_ui_state_message_before_the_users_words() -> None:
    context = LLMContext([{"role": "system", "content": "persona"}])
    state = UIState()
    state.refresh(context)
    assert len(context.messages) == 1, "nothing before the first snapshot"
    state.update(snapshot())
    state.refresh(context)
    context.add_message(UserMessage.text("hello"))
    state.refresh(context)
    state.refresh(context)
    wire = context.to_openai()
    ui = [m for m in wire if "<ui_state>" in m["content"]]
    assert len(ui) == 1 and wire[-2] is ui[0] and wire[-1]["content"] == "hello"
    assert [m["role"] for m in wire] == ["system", "user", "user"], "page data: not system"


# -- bad payloads ------------------------------------------------------------------------------


def nested(depth: int) -> dict[str, Any]:
    tree = node("leaf", "button")
    for _ in range(depth - 1):
        tree = node("n", "group", children=[tree])
    return tree


def test_a_deep_but_reasonable_tree_is_accepted() -> None:
    data = UISnapshotData.model_validate({"tree": {"root": nested(64), "captured_at": 1}})
    state = UIState()
    state.update(data.tree)
    assert state.find("leaf") is not None


@pytest.mark.parametrize(
    ("type_", "data", "error"),
    [
        ("ui-event", {}, "event"),
        ("ui-event", {"event": ""}, "event"),
        ("ui-event", {"event": 7}, "event"),
        ("ui-snapshot", {}, "tree"),
        ("ui-snapshot", {"tree": {"captured_at": 1}}, "tree.root"),
        ("ui-snapshot", {"tree": {"root": {"ref": "a"}, "captured_at": 1}}, "role"),
        ("ui-snapshot", {"tree": {"root": {"ref": "a", "role": "x"}}}, "captured_at"),
        ("ui-snapshot", {"tree": {"root": nested(65), "captured_at": 1}}, "deeper than 64"),
        ("ui-cancel-job-group", {}, "job_id"),
        ("ui-cancel-job-group", {"job_id": 5}, "job_id"),
    ],
)
def test_bad_ui_payloads_are_refused_with_the_message_id(
    type_: str, data: dict[str, Any], error: str
) -> None:
    envelope = protocol.parse_envelope(
        {"label": "rtvi-ai", "type": type_, "id": "m1", "data": data}
    )
    with pytest.raises(RTVIError) as caught:
        protocol.parse_data(envelope)
    assert caught.value.msg_id == "m1"
    assert error in caught.value.error and type_ in caught.value.error


# -- the worker ----------------------------------------------------------------------------


class Recorder:
    """A session stand-in: what the worker sends, spawns and reports."""

    def __init__(self, **settings: Any) -> None:
        self.sent: list[dict[str, Any]] = []
        self.reported: list[RTVIError] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.worker = UIWorker(
            Settings(**settings), self.sent.append, self.spawn, self.reported.append
        )

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.append(task)
        return task

    def commands(self) -> list[tuple[str, Any]]:
        return [
            (m["data"]["command"], m["data"]["payload"])
            for m in self.sent
            if m["type"] == "ui-command"
        ]


def test_send_command_puts_standard_and_custom_payloads_on_the_wire() -> None:
    r = Recorder()
    r.worker.send_command("toast", Toast(title="Saved", duration_ms=1500))
    r.worker.send_command("confetti", {"colors": ["red"]})
    r.worker.send_command("refresh")
    assert r.sent == [
        {
            "label": "rtvi-ai",
            "type": "ui-command",
            "data": {"command": "toast", "payload": {"title": "Saved", "duration_ms": 1500}},
        },
        {
            "label": "rtvi-ai",
            "type": "ui-command",
            "data": {"command": "confetti", "payload": {"colors": ["red"]}},
        },
        {"label": "rtvi-ai", "type": "ui-command", "data": {"command": "refresh", "payload": None}},
    ]


async def test_ui_events_reach_app_handlers_sync_and_async() -> None:
    r = Recorder()
    seen: list[tuple[str, Any]] = []

    def on_click(worker: UIWorker, event: UIEventData) -> None:
        seen.append(("click", event.payload))
        worker.send_command("toast", Toast(title="clicked"))

    async def on_saved(worker: UIWorker, event: UIEventData) -> None:
        await asyncio.sleep(0)
        seen.append(("saved", event.payload))

    async def on_broken(worker: UIWorker, event: UIEventData) -> None:
        raise RuntimeError("boom")

    r.worker.handlers.update(click=on_click, saved=on_saved, broken=on_broken)
    r.worker.handle("ui-event", "a", UIEventData(event="click", payload={"ref": "e4"}))
    r.worker.handle("ui-event", "b", UIEventData(event="saved", payload=3))
    r.worker.handle("ui-event", "c", UIEventData(event="nobody-listens"))
    r.worker.handle("ui-event", "d", UIEventData(event="broken"))
    await asyncio.gather(*r.tasks)
    assert seen == [("click", {"ref": "e4"}), ("saved", 3)]
    assert r.commands() == [("toast", {"title": "clicked"})]
    assert [(e.msg_id, e.error) for e in r.reported] == [("d", "ui-event 'broken' failed: boom")]

    def raises(worker: UIWorker, event: UIEventData) -> None:
        raise ValueError("bad")

    r.worker.handlers["sync-broken"] = raises
    with pytest.raises(RTVIError) as caught:
        r.worker.handle("ui-event", "e", UIEventData(event="sync-broken"))
    assert caught.value.msg_id == "e"


def test_ui_events_become_context_notes_only_when_asked() -> None:
    for enabled in (False, True):
        r = Recorder(ui_events_to_llm=enabled)
        context = LLMContext()
        conversation = Conversation(context, llm=None)  # type: ignore[arg-type]
        r.worker.attach(context, conversation, None, None)
        r.worker.handle("ui-event", "a", UIEventData(event="click", payload={"ref": "e4"}))
        notes = [m["content"] for m in context.to_openai() if "UI event" in m["content"]]
        assert [m["role"] for m in context.to_openai()] == (["user"] if enabled else [])
        assert len(notes) == (1 if enabled else 0)
        if enabled:
            assert notes[0].startswith('<page_data source="ui-event">')
            assert 'UI event \'click\': {"ref": "e4"}\n</page_data>' in notes[0]


def test_cancel_without_tools_is_refused() -> None:
    r = Recorder()
    with pytest.raises(RTVIError, match="no job groups"):
        r.worker.handle("ui-cancel-job-group", "x", UICancelJobGroupData(job_id="j"))


async def test_ui_tools_are_offered_from_the_first_snapshot_in_auto_mode() -> None:
    for mode, before, after in (("auto", False, True), ("on", True, True), ("off", False, False)):
        r = Recorder(ui_tools=mode)
        registry = r.worker.tool_registry(ToolRegistry(), can_call=True)
        context = LLMContext()
        conversation = Conversation(context, llm=None)  # type: ignore[arg-type]
        r.worker.attach(context, conversation, None, registry)
        names = {t["function"]["name"] for t in context.tools or ()}
        assert (names == UI_TOOL_NAMES) is before, (mode, names)
        r.worker.handle("ui-snapshot", "s", UISnapshotData(tree=snapshot()))
        names = {t["function"]["name"] for t in context.tools or ()}
        assert (names == UI_TOOL_NAMES) is after, (mode, names)
        # The <ui_state> goes with the tools, refreshed before each run.
        for prepare in conversation.before_llm_run:
            prepare()
        has_state = any("<ui_state>" in m["content"] for m in context.to_openai())
        assert has_state is after
    # Built-in tools off: the UI tools alone, still from the first snapshot on.
    r = Recorder()
    registry = r.worker.tool_registry(None, can_call=True)
    assert registry is not None and len(registry) == 0
    context = LLMContext()
    r.worker.attach(context, Conversation(context, llm=None), None, registry)  # type: ignore[arg-type]
    assert context.tools is None
    r.worker.handle("ui-snapshot", "s", UISnapshotData(tree=snapshot()))
    assert {t["function"]["name"] for t in context.tools or ()} == UI_TOOL_NAMES
    assert set(spec.name for spec in registry) == UI_TOOL_NAMES, "the runner can run them"
    # The shared tools stay shared: one added later is found by the session's registry too,
    # while the UI tools (bound to one session) never reach the shared registry.
    shared = ToolRegistry()
    r = Recorder()
    registry = r.worker.tool_registry(shared, can_call=True)
    context = LLMContext()
    r.worker.attach(context, Conversation(context, llm=None), None, registry)  # type: ignore[arg-type]
    r.worker.handle("ui-snapshot", "s", UISnapshotData(tree=snapshot()))

    async def later() -> None:
        """Added after the session started."""

    spec = shared.register(ToolSpec.from_function(later))
    assert registry is not None and registry.get("later") is spec and "later" in registry
    assert len(registry) == len(UI_TOOL_NAMES) + 1 and len(shared) == 1
    with pytest.raises(ValueError, match="already registered"):
        registry.register(spec)
    # An LLM that cannot call tools gets none, and snapshots are kept all the same.
    for mode in ("auto", "on", "off"):
        r = Recorder(ui_tools=mode)
        assert r.worker.tool_registry(None, can_call=False) is None
        context = LLMContext()
        conversation = Conversation(context, llm=None)  # type: ignore[arg-type]
        r.worker.attach(context, conversation, None, None)
        r.worker.handle("ui-snapshot", "s", UISnapshotData(tree=snapshot()))
        assert context.tools is None and r.worker.state.nodes == 8
        assert not r.worker.tools_offered
        for prepare in conversation.before_llm_run:
            prepare()
        assert context.messages == [], "no <ui_state> without the tools"


async def test_ui_tools_send_commands_and_check_refs() -> None:
    r = Recorder()
    r.worker.state.update(snapshot())
    tools = {spec.name: spec for spec in ui_tools(r.worker)}
    assert set(tools) == UI_TOOL_NAMES

    async def call(name: str, **arguments: Any) -> Any:
        spec = tools[name]
        assert spec.handler is not None
        return await spec.handler(**arguments)

    assert await call("show_toast", title="Hi", description="there") == {
        "shown": "toast",
        "title": "Hi",
    }
    await call("navigate", view="notes")
    await call("highlight_element", ref="e4", duration_ms=800)
    await call("focus_element", ref="e3")
    await call("click_element", ref="e4")
    await call("select_text", ref="e6", start_offset=8, end_offset=20)
    await call("fill_field", ref="e3", value="milk")
    assert r.commands() == [
        ("toast", {"title": "Hi", "description": "there"}),
        ("navigate", {"view": "notes"}),
        ("highlight", {"ref": "e4", "duration_ms": 800}),
        ("focus", {"ref": "e3"}),
        ("click", {"ref": "e4"}),
        ("select_text", {"ref": "e6", "start_offset": 8, "end_offset": 20}),
        ("set_input_value", {"ref": "e3", "value": "milk"}),
    ]
    sent = len(r.sent)
    with pytest.raises(ValueError, match="before start_offset"):
        await call("select_text", ref="e6", start_offset=5, end_offset=2)
    assert "error" in await call("highlight_element", ref="e99")
    assert await call("click_element", ref="e5") == {"error": "[e5] is disabled"}
    assert len(r.sent) == sent, "nothing is sent for a bad ref"


# -- through a real server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    return start_server(**stub.server_settings(ui_events_to_llm="true"))


TEXT_ONLY = {"audio_response": False}


@pytest.mark.e2e
async def test_snapshot_reaches_the_llm_and_its_ui_tools_reach_the_client(
    stub_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    calls = (
        StubToolCall("show_toast", {"title": "Two plus two is four"}),
        StubToolCall("highlight_element", {"ref": "e4"}),
        StubToolCall("fill_field", {"ref": "e3", "value": "milk"}),
    )
    stub.script_chat("Nothing to do yet.", ChatReply("", calls), "Done.")
    client = RTCTestClient(stub_server.url)
    try:
        await client.connect()
        # Before any snapshot: no UI tools, no <ui_state>.
        client.send_rtvi("send-text", {"content": "Hi.", "options": TEXT_ONLY})
        assert await stub.wait_for(lambda: len(stub.requests("/v1/chat/completions")) == 1, 10)
        first = stub.requests("/v1/chat/completions")[0].body
        assert not {t["function"]["name"] for t in first.get("tools", [])} & UI_TOOL_NAMES
        assert not any("<ui_state>" in str(m.get("content")) for m in first["messages"])

        for captured_at in (1, 2):  # two snapshots: one <ui_state>, the newest
            tree = json.loads(json.dumps(PAGE))
            tree["captured_at"] = captured_at
            tree["root"]["name"] = f"Parley {captured_at}"
            client.send_rtvi("ui-snapshot", {"tree": tree})
        client.send_rtvi("ui-event", {"event": "click", "payload": {"ref": "e4"}})
        client.send_rtvi("send-text", {"content": "Show me.", "options": TEXT_ONLY})
        toast = await client.wait_for(lambda m: m.get("type") == "ui-command", within=10)
        assert toast["data"] == {"command": "toast", "payload": {"title": "Two plus two is four"}}
        await client.wait_for(
            lambda m: m.get("type") == "bot-output" and m["data"]["text"] == "Done."
        )
        commands = [m["data"] for m in client.messages if m.get("type") == "ui-command"]
        assert commands[1:] == [
            {"command": "highlight", "payload": {"ref": "e4"}},
            {"command": "set_input_value", "payload": {"ref": "e3", "value": "milk"}},
        ]
        requests = stub.requests("/v1/chat/completions")
        second = requests[1].body
        assert UI_TOOL_NAMES <= {t["function"]["name"] for t in second["tools"]}
        states = [m["content"] for m in second["messages"] if "<ui_state>" in str(m["content"])]
        assert len(states) == 1 and '[e0] document "Parley 2"' in states[0]
        assert second["messages"][-2]["content"] == states[0], "the outline, then the words"
        assert second["messages"][-1] == {"role": "user", "content": "Show me."}
        assert all(m["role"] == "user" for m in second["messages"] if "<ui_state>" in m["content"])
        assert '[e3] textbox "Title" value="groceries" (focused)' in states[0]
        notes = [m for m in second["messages"] if "UI event" in str(m["content"])]
        assert [m["role"] for m in notes] == ["user"]
        assert 'UI event \'click\': {"ref": "e4"}' in notes[0]["content"]
        # The answer after the tools still has exactly one <ui_state>.
        third = requests[2].body["messages"]
        assert sum("<ui_state>" in str(m.get("content")) for m in third) == 1
        info = await client.request("session-info")
        assert info["data"]["d"]["ui"]["snapshots"] == 2
        assert info["data"]["d"]["ui"]["tools_offered"] is True
    finally:
        await client.close()
        stub.reset()


@pytest.mark.e2e
async def test_bad_ui_messages_get_error_responses_and_the_session_goes_on(
    stub_server: ServerProcess,
) -> None:
    client = RTCTestClient(stub_server.url)
    bad = [
        ("ui-event", {"payload": 1}),
        ("ui-snapshot", {"tree": {"root": {"ref": "x"}, "captured_at": 1}}),
        ("ui-snapshot", None),
        ("ui-snapshot", {"tree": {"root": nested(200), "captured_at": 1}}),
        ("ui-cancel-job-group", {"reason": "no id"}),
        ("ui-cancel-job-group", {"job_id": "unknown"}),
    ]
    try:
        await client.connect()
        for type_, data in bad:
            msg_id = client.send_rtvi(type_, data)
            answer = await client.wait_for(lambda m, i=msg_id: m.get("id") == i)
            assert answer["type"] == "error-response", answer
            assert answer["data"]["error"], answer
        # JSON nested too deeply to decode: refused before parsing (server/guards/client_json.py).
        root = '{"ref": "leaf", "role": "button"}'
        for _ in range(600):
            root = '{"ref": "n", "role": "group", "children": [' + root + "]}"
        client.send_raw(
            '{"label": "rtvi-ai", "type": "ui-snapshot", "id": "deep", '
            '"data": {"tree": {"captured_at": 1, "root": ' + root + "}}}"
        )
        error = await client.wait_for(lambda m: m.get("type") == "error")
        assert "nested deeper than 32 levels" in error["data"]["error"]
        echo = await client.request("echo", {"still": "here"})
        assert echo["type"] == "server-response" and echo["data"]["d"] == {"still": "here"}
    finally:
        await client.close()


# -- app handlers, in a server run in this process (so the test can register them) -------------


@pytest.fixture
def app_server(stub: OpenAIStub) -> Iterator[tuple[FastAPI, str]]:
    port = free_port()
    settings = Settings(
        host="127.0.0.1", port=port, llm="openai", stt="openai", tts="openai",
        preload_models=False, greeting="",
        OPENAI_BASE_URL=stub.base_url, OPENAI_API_KEY=stub.api_key,
    )  # fmt: skip
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="parley-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield app, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


async def test_ui_events_reach_the_apps_handlers_in_a_live_session(
    app_server: tuple[FastAPI, str],
) -> None:
    app, url = app_server
    seen: list[tuple[str, Any]] = []

    def on_saved(worker: UIWorker, event: UIEventData) -> None:
        seen.append((event.event, event.payload))
        worker.send_command("toast", Toast(title=f"Saved {event.payload['title']}"))

    async def on_broken(worker: UIWorker, event: UIEventData) -> None:
        raise RuntimeError("the app failed")

    app.state.registry.ui_event_handlers.update({"note-saved": on_saved, "broken": on_broken})
    async with RTCTestClient(url) as client:
        client.send_rtvi("ui-event", {"event": "note-saved", "payload": {"title": "milk"}})
        toast = await client.wait_for(lambda m: m.get("type") == "ui-command")
        assert toast["data"] == {"command": "toast", "payload": {"title": "Saved milk"}}
        assert seen == [("note-saved", {"title": "milk"})]
        broken = client.send_rtvi("ui-event", {"event": "broken"})
        refused = await client.wait_for(lambda m: m.get("id") == broken)
        assert refused["type"] == "error-response"
        assert refused["data"]["error"] == "ui-event 'broken' failed: the app failed"
        echo = await client.request("echo", 1)
        assert echo["type"] == "server-response", "the session goes on"


class _Conversation:
    """What the worker attaches to: an emitter, a feed and the before-run hooks."""

    def __init__(self) -> None:
        self.events = Emitter()
        self.before_llm_run: list[Any] = []

    def feed(self, event: Any) -> None:
        self.events.emit(event)


async def _lookup(city: str) -> dict[str, Any]:
    """Look a city up.

    Args:
        city: Which one.
    """
    await asyncio.sleep(0)
    return {"city": city, "found": True}


def test_start_job_group_is_refused_in_a_session_without_tools() -> None:
    r = Recorder()
    with pytest.raises(JobGroupError, match="runs no tools"):
        r.worker.start_job_group([("lookup", {"city": "Oslo"})])


async def test_start_job_group_runs_the_tools_as_a_group_the_client_follows() -> None:
    """The documented app API (README "UI"): ``session.ui.start_job_group``."""
    r = Recorder()
    conversation = _Conversation()
    registry = ToolRegistry()
    registry.register(ToolSpec.from_function(_lookup))
    runner = ToolRunner(registry, conversation.feed)
    stand_in: Any = conversation  # what attach uses of a Conversation
    r.worker.attach(LLMContext(), stand_in, runner, registry)
    runner.attach(conversation.events)
    job_id = r.worker.start_job_group(
        [("_lookup", {"city": "Oslo"}), ("_lookup", {"city": "Lima"})], label="cities"
    )
    for _ in range(50):
        await asyncio.sleep(0)
        groups = [m["data"] for m in r.sent if m["type"] == "ui-job-group"]
        if groups and groups[-1]["kind"] == "group_completed":
            break
    kinds = [g["kind"] for g in groups]
    assert kinds[0] == "group_started" and kinds[-1] == "group_completed"
    assert groups[0]["label"] == "cities" and all(g["job_id"] == job_id for g in groups)
    done = [g for g in groups if g["kind"] == "job_completed"]
    assert sorted(g["response"]["city"] for g in done) == ["Lima", "Oslo"]
    assert all(g["status"] == "completed" for g in done)
