"""Images over a real call: a Parley server with ``PARLEY_LLM_VISION``, an aiortc client
sending a camera track (a solid colour, VP8-encoded by aiortc, answering keyframe
requests as a browser does), and the OpenAI-compatible stub, whose recorded request
bodies show what the LLM was sent."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import pytest

from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.rtc_camera import ColourCamera
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
RED, GREEN, BLUE = (200, 30, 40), (30, 190, 60), (40, 50, 210)


@pytest.fixture(scope="module")
def models() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        yield stub


@pytest.fixture(scope="module")
def seeing(start_server: Callable[..., ServerProcess], models: OpenAIStub) -> ServerProcess:
    """Vision on, pictures only when the LLM looks, at most two kept."""
    return start_server(**models.server_settings(llm_vision="true", vision_max_images="2"))


def images(message: dict[str, Any]) -> list[str]:
    """The image URLs of one wire message."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]


def picture(url: str) -> tuple[int, int, tuple[int, int, int]]:
    """Width, height and mean RGB colour of a ``data:image/jpeg;base64`` URL."""
    prefix = "data:image/jpeg;base64,"
    assert url.startswith(prefix), url[:40]
    decoder = av.CodecContext.create("mjpeg", "r")
    frame = decoder.decode(av.Packet(base64.b64decode(url[len(prefix) :])))[0]
    rgb = frame.to_ndarray(format="rgb24").reshape(-1, 3).mean(axis=0)
    return frame.width, frame.height, tuple(int(c) for c in rgb)


def near(colour: tuple[int, int, int], expected: tuple[int, int, int]) -> bool:
    return bool(np.all(np.abs(np.array(colour) - np.array(expected)) < 20))


def all_images(body: dict[str, Any]) -> list[str]:
    return [url for message in body["messages"] for url in images(message)]


async def ask(client: RTCTestClient, stub: OpenAIStub, text: str, requests: int) -> list[Any]:
    """Type ``text`` (answered in text) and wait until the stub has ``requests`` more chat
    requests; returns those requests' bodies."""
    before = len(stub.requests(CHAT))
    client.send_rtvi("send-text", {"content": text, "options": {"audio_response": False}})
    assert await stub.wait_for(lambda: len(stub.requests(CHAT)) >= before + requests, within=10)
    await client.wait_for(lambda m: m.get("type") == "bot-llm-stopped", within=10)
    return [r.body for r in stub.requests(CHAT)[before:]]


def look(name: str = "look_at_camera", call_id: str = "look1") -> ChatReply:
    return ChatReply(tool_calls=(ToolCall(name, {}, id=call_id),))


async def video_info(server: ServerProcess, client: RTCTestClient) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{server.url}/api/sessions/{client.pc_id}")
    return response.json()


async def connected(server: ServerProcess, camera: ColourCamera | None) -> RTCTestClient:
    client = RTCTestClient(server.url, camera=camera)
    await client.connect()
    if camera is not None:  # the first keyframe decoded: the camera is live
        for _ in range(50):
            info = (await video_info(server, client))["video"]
            if info and info["camera"]["decoded"]:
                break
            await asyncio.sleep(0.1)
    return client


async def test_a_look_puts_the_camera_picture_in_the_context(
    seeing: ServerProcess, models: OpenAIStub
) -> None:
    client = await connected(seeing, ColourCamera(RED))
    try:
        models.script_chat(look(), "It is red.")
        first, second = await ask(client, models, "What do you see?", requests=2)
        offered = [t["function"]["name"] for t in first["tools"]]
        assert {"look_at_camera", "look_at_screen"} <= set(offered)
        assert all_images(first) == []  # no picture until the LLM looks
        messages = second["messages"]
        at = next(i for i, m in enumerate(messages) if m.get("tool_call_id") == "look1")
        result = json.loads(messages[at]["content"])
        assert result["image"] == "the image follows in the next message"
        assert (result["source"], result["width"], result["height"]) == ("camera", 512, 384)
        assert messages[at + 1]["role"] == "user"
        [url] = images(messages[at + 1])
        width, height, colour = picture(url)
        assert (width, height) == (512, 384)  # 640 x 480 sent, 512 px on the long side
        assert near(colour, RED), colour
        # ~30 more frames arrive in 2 s; wait for 20 of them (later on a loaded machine).
        async with asyncio.timeout(30):
            while (video := (await video_info(seeing, client))["video"]["camera"])["frames"] < 20:
                await asyncio.sleep(0.2)
        # Received, not decoded frame by frame: the first keyframe and the look's, at most.
        assert video["frames"] >= 20 and video["decoded"] <= 2, video
        assert (await video_info(seeing, client))["conversation"]["vision"]["tool_pictures"] == 1
    finally:
        await client.close()


async def test_a_look_sees_the_camera_as_it_is_now(
    seeing: ServerProcess, models: OpenAIStub
) -> None:
    camera = ColourCamera(RED)
    client = await connected(seeing, camera)
    try:
        camera.show(BLUE)
        await asyncio.sleep(1.2)  # the first picture (red) is no longer fresh
        models.script_chat(look(), "It is blue.")
        _, second = await ask(client, models, "And now?", requests=2)
        [url] = all_images(second)
        assert near(picture(url)[2], BLUE)  # a keyframe asked for and decoded just now
    finally:
        await client.close()


async def test_the_budget_keeps_only_the_newest_pictures(
    seeing: ServerProcess, models: OpenAIStub
) -> None:
    camera = ColourCamera(RED)
    client = await connected(seeing, camera)
    try:
        last: dict[str, Any] = {}
        for n, colour in enumerate((RED, GREEN, BLUE)):
            camera.show(colour)
            await asyncio.sleep(1.2)
            models.script_chat(look(call_id=f"look{n}"), "Seen.")
            last = (await ask(client, models, f"Look {n}.", requests=2))[1]
        colours = [picture(url)[2] for url in all_images(last)]
        assert len(colours) == 2, colours  # PARLEY_VISION_MAX_IMAGES=2
        assert near(colours[0], GREEN) and near(colours[1], BLUE), colours
        vision = (await video_info(seeing, client))["conversation"]["vision"]
        assert vision["tool_pictures"] == 3 and vision["dropped"] == 1
    finally:
        await client.close()


async def test_without_a_camera_a_look_is_an_error_the_llm_reads(
    seeing: ServerProcess, models: OpenAIStub
) -> None:
    client = await connected(seeing, camera=None)
    try:
        models.script_chat(look("look_at_screen"), "You are not sharing anything.")
        _, second = await ask(client, models, "What is on my screen?", requests=2)
        result = next(m for m in second["messages"] if m.get("tool_call_id") == "look1")
        assert json.loads(result["content"]) == {
            "error": "the user is not sharing their screen right now"
        }
        assert all_images(second) == []
    finally:
        await client.close()


async def test_every_turn_carries_the_picture_of_when_the_user_spoke(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, speech_wav: Path
) -> None:
    server = start_server(
        **models.server_settings(llm_vision="true", vision_every_turn="true", turn_end="fixed")
    )
    camera = ColourCamera(RED)
    client = await connected(server, camera)
    try:
        await asyncio.sleep(1.2)
        camera.show(GREEN)  # the picture decoded at connect (red) is stale by the turn
        before = len(models.requests(CHAT))
        client.play(str(speech_wav))
        assert await models.wait_for(lambda: len(models.requests(CHAT)) > before, within=15)
        body = models.requests(CHAT)[before].body
        user = body["messages"][-1]
        assert user["role"] == "user" and user["content"][0]["type"] == "text"
        [url] = images(user)
        assert near(picture(url)[2], GREEN)  # asked for as the user started speaking
        offered = [t["function"]["name"] for t in body["tools"]]
        assert "look_at_camera" in offered
    finally:
        await client.close()


async def test_without_vision_video_is_refused_and_nothing_looks(
    start_server: Callable[..., ServerProcess], models: OpenAIStub
) -> None:
    server = start_server(**models.server_settings())
    async with RTCTestClient(server.url, camera=ColourCamera(RED)) as client:
        sdp = client.pc.remoteDescription.sdp
        video = sdp[sdp.index("m=video") :].split("m=application")[0]
        assert "a=inactive" in video  # the browser sends no video at all
        [first] = await ask(client, models, "Hello?", requests=1)
        offered = [t["function"]["name"] for t in first.get("tools", [])]
        assert "look_at_camera" not in offered and all_images(first) == []
        assert (await video_info(server, client))["video"] is None
