"""The context mirrored into a realtime provider's conversation, and the bookkeeping of
utterances and of the provider's own responses: pure logic, no socket."""

from __future__ import annotations

from typing import Any

from pipeline.realtime.mirror import Mirror, ReplyItem
from pipeline.realtime.server_turns import (
    MAX_EVENTS,
    MAX_WAITING,
    UNCLAIMED_SECONDS,
    ServerResponses,
)
from pipeline.realtime.utterances import Utterances
from pipeline.realtime.wire import ServerEvent

SYSTEM = {"role": "system", "content": "Be brief."}


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"].split(".")[-1] for e in events]


def test_a_message_is_sent_once_and_two_equal_ones_are_two() -> None:
    mirror = Mirror("ga")
    context = [SYSTEM, {"role": "user", "content": "yes"}]
    first = mirror.plan(context)
    assert first.instructions == "Be brief." and kinds(first.events) == ["create"]
    assert mirror.plan(context).events == [], "nothing new"
    again = mirror.plan(
        [*context, {"role": "assistant", "content": "Ok."}, {"role": "user", "content": "yes"}]
    )
    assert kinds(again.events) == ["create", "create"], "the second 'yes' is its own"


def test_a_turn_rewritten_by_a_merge_keeps_its_audio_and_gains_the_new() -> None:
    mirror = Mirror("ga")
    mirror.pending_user = ["audio_1"]
    mirror.plan([SYSTEM, {"role": "user", "content": "I want to"}])
    mirror.pending_user = ["audio_2"]
    plan = mirror.plan([SYSTEM, {"role": "user", "content": "I want to book a table"}])
    assert plan.events == [], "the audio items stand for the merged turn: nothing to send"
    assert mirror.plan([SYSTEM]).events == []
    assert mirror.pending_user == ["audio_1", "audio_2"], "the audio waits for the next turn"


def test_vanished_messages_are_deleted_and_a_response_is_bound_not_copied() -> None:
    mirror = Mirror("ga")
    mirror.plan([SYSTEM, {"role": "user", "content": "Hi"}, {"role": "system", "content": "x"}])
    mirror.pending_reply = [
        ReplyItem("bot_1", "message"),
        ReplyItem("call_item", "function_call", "call_9"),
    ]
    plan = mirror.plan(
        [SYSTEM, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    )
    assert kinds(plan.events) == ["delete", "delete"]
    assert plan.events[-1]["item_id"] == "call_item", "a call the context does not hold"


def test_running_calls_and_async_progress_are_not_sent() -> None:
    mirror = Mirror("ga")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    base = [SYSTEM, {"role": "user", "content": "Go"}, {"role": "assistant", "tool_calls": [call]}]
    running = mirror.plan([*base, {"role": "tool", "tool_call_id": "c1", "content": "IN_PROGRESS"}])
    assert kinds(running.events) == ["create", "create"], "the user turn and the call only"
    done = mirror.plan([*base, {"role": "tool", "tool_call_id": "c1", "content": '{"ok": 1}'}])
    item = done.events[0]["item"]
    assert (item["type"], item["call_id"], item["output"]) == (
        "function_call_output",
        "c1",
        '{"ok": 1}',
    )


def test_an_utterance_discarded_before_its_commit_comes_back_is_not_kept() -> None:
    utterances = Utterances()
    utterances.sent(10.0)
    utterances.sent(12.0)
    assert utterances.committed("a") is True
    assert utterances.discard(12.1) is None, "its item is not known yet"
    assert utterances.committed("b") is False, "deleted when it comes"
    assert not utterances.in_flight
    utterances.sent(20.0)
    utterances.refused()  # too little audio: no item will come
    assert not utterances.in_flight
    assert utterances.discard(10.2) == "a"


def test_the_providers_responses_wait_to_be_claimed_and_go_stale() -> None:
    now = [0.0]
    responses = ServerResponses(clock=lambda: now[0])
    responses.started("r1")
    assert responses.feed("r1", ServerEvent("response.output_item.added"))
    assert not responses.feed("r9", ServerEvent("response.done")), "not one of its own"
    now[0] = UNCLAIMED_SECONDS + 1
    responses.started("r2")
    stale = responses.stale()
    assert [(rid, len(events)) for rid, events in stale] == [("r1", 1)]
    assert responses.claim() == ("r2", [])
    assert responses.claim() is None


def test_what_waits_unclaimed_is_bounded_in_responses_and_in_events() -> None:
    # A caller who keeps making sounds the provider answers and Parley takes for no turn.
    responses = ServerResponses(clock=lambda: 0.0)
    for n in range(MAX_WAITING + 3):
        responses.started(f"r{n}")
        assert responses.feed(f"r{n}", ServerEvent("response.output_item.added"))
    assert responses.pushed_out
    assert [rid for rid, _ in responses.stale()] == ["r0", "r1", "r2"]  # the oldest first
    assert not responses.pushed_out
    for _ in range(MAX_EVENTS + 1):  # a long answer no turn claims: its events stop there
        responses.feed("r3", ServerEvent("response.output_audio.delta"))
    [(rid, events)] = responses.stale()
    assert rid == "r3" and len(events) == MAX_EVENTS + 1
    assert not responses.feed("r3", ServerEvent("response.output_audio.delta"))
    assert responses.claim() == ("r4", [ServerEvent("response.output_item.added")])
