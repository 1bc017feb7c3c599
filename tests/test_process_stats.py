"""Process figures, and a closed peer connection freed without the cyclic collector."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import Callable, Iterator

import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription

from server.media.outbound_track import PacedAudioTrack
from server.media.peer_connection import create_peer_connection, release_peer_connection
from server.ops.heap import release_memory
from server.ops.process_stats import process_start_time, process_stats
from testkit import rtc_client
from testkit.server_process import ServerProcess, metric


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    yield
    gc.enable()


async def connected_pair() -> tuple[RTCPeerConnection, RTCPeerConnection]:
    """A client (mic, data channel) and a server-side peer from create_peer_connection."""
    client = RTCPeerConnection()
    client.addTransceiver(rtc_client.TestMicrophone(), direction="sendrecv")
    client.createDataChannel("chat")
    server = create_peer_connection([])
    server.on("datachannel", lambda channel: channel.on("message", print))
    await client.setLocalDescription(await client.createOffer())
    await server.setRemoteDescription(client.localDescription)
    server.getTransceivers()[0].sender.replaceTrack(PacedAudioTrack())
    await server.setLocalDescription(await server.createAnswer())
    answer = server.localDescription
    await client.setRemoteDescription(RTCSessionDescription(answer.sdp, answer.type))
    async with asyncio.timeout(10):
        while server.connectionState != "connected":
            await asyncio.sleep(0.05)
    return client, server


def test_figures_describe_this_process() -> None:
    stats = process_stats()
    assert stats.rss_bytes > 10 * 2**20
    assert stats.open_fds >= 3 and stats.threads >= 1
    assert stats.asyncio_tasks == 0  # no event loop running here
    assert set(stats.as_dict()) >= {"rss_bytes", "peer_connections", "peer_connections_open"}


async def test_a_released_peer_connection_is_freed_by_reference_counting(
    no_cyclic_gc: None,
) -> None:
    before = process_stats()
    client, server = await connected_pair()
    during = process_stats()
    assert during.peer_connections == before.peer_connections + 1
    assert during.peer_connections_open == before.peer_connections_open + 1
    await client.close()
    await server.close()
    assert process_stats().peer_connections_open == before.peer_connections_open
    release_peer_connection(server)
    release_peer_connection(client)
    gone = weakref.ref(server)
    del server, client
    await asyncio.sleep(0.2)  # aiortc's own tasks finish
    assert gone() is None, "something still holds the closed peer connection"
    assert process_stats().peer_connections == before.peer_connections


async def test_without_release_a_closed_peer_connection_waits_for_the_collector(
    no_cyclic_gc: None,
) -> None:
    client, server = await connected_pair()
    await client.close()
    await server.close()
    gone = weakref.ref(server)
    del server
    await asyncio.sleep(0.2)
    assert gone() is not None, "aiortc's cycles keep it (why release exists)"
    release_peer_connection(client)
    gc.collect()
    assert gone() is None


def test_release_memory_frees_cycles_and_keeps_the_heap_usable(no_cyclic_gc: None) -> None:
    class Node:
        other: Node

    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    assert gone() is not None
    release_memory()
    assert gone() is None
    assert len(bytearray(10 * 2**20)) == 10 * 2**20  # malloc still works after the trim


def test_process_start_time_is_when_the_process_began() -> None:
    started = process_start_time()
    assert started <= time.time()
    assert started == process_start_time(), "read once: a process starts once"


def test_the_metric_is_the_process_start_not_the_app_start(
    start_server: Callable[..., ServerProcess],
) -> None:
    before = time.time()
    server = start_server()
    started = metric(server, "process_start_time_seconds")
    # The kernel counts in clock ticks (10 ms) and the launch is timed after Popen returns:
    # the start lies between the two, whereas the app is built only after the imports.
    assert before - 0.05 <= started <= server.launched_at, (before, started, server.launched_at)
