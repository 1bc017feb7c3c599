"""Process figures (one /proc reader for /health, /metrics and the benches), and a closed
peer connection freed without the cyclic collector."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import httpx
import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription

from server.media.outbound_track import PacedAudioTrack
from server.media.peer_connection import create_peer_connection, release_peer_connection
from server.ops.metrics import ServerMetrics
from server.process.heap import release_memory
from server.process.proc import ProcReader
from server.process.stats import process_stats
from testkit import rtc_microphone
from testkit.exposition import parse
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
    client.addTransceiver(rtc_microphone.TestMicrophone(), direction="sendrecv")
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


def test_open_fds_and_threads_follow_what_the_process_holds() -> None:
    before = process_stats()
    read, write = os.pipe()
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        during = process_stats()
    finally:
        stop.set()
        worker.join()
        os.close(read)
        os.close(write)
    assert during.open_fds == before.open_fds + 2, "a pipe is two descriptors"
    assert during.threads == before.threads + 1
    assert process_stats().open_fds == before.open_fds


def test_health_and_metrics_count_the_same_descriptors_in_process() -> None:
    metrics = ServerMetrics()
    # Threads other tests left (model loaders, pools winding down) may end between two
    # reads: compare a scrape taken while the counts held still.
    for _ in range(20):
        stats = process_stats()
        scraped = parse(metrics.render().decode())
        after = process_stats()
        if (after.threads, after.open_fds) == (stats.threads, stats.open_fds):
            break
        time.sleep(0.05)
    assert scraped.value("process_open_fds") == stats.open_fds
    assert scraped.value("parley_threads") == stats.threads
    rss = scraped.value("process_resident_memory_bytes") or 0
    assert abs(rss - stats.rss_bytes) < 8 * 2**20, "read a moment apart, same measure"


def test_the_reader_reads_another_process_and_says_when_it_is_gone() -> None:
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        figures = ProcReader(child.pid).read()
        assert figures.cpu_seconds is not None and figures.cpu_seconds >= 0
        assert figures.rss_bytes is not None and figures.rss_bytes > 2**20
        assert figures.open_fds is not None and figures.open_fds >= 3  # stdin, out, err
        assert figures.threads == 1
        assert figures.start_time is not None and before - 0.05 <= figures.start_time <= time.time()
    finally:
        child.kill()
        child.wait()
    gone = ProcReader(child.pid).read()
    assert gone.cpu_seconds is None and gone.open_fds is None and gone.threads is None


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


def test_the_start_time_is_one_instant_in_the_past() -> None:
    started = ProcReader().read().start_time
    assert started is not None and started <= time.time()
    assert ProcReader().read().start_time == started, "a process starts once"


@pytest.mark.e2e
def test_the_metric_is_the_process_start_not_the_app_start(
    start_server: Callable[..., ServerProcess],
) -> None:
    before = time.time()
    server = start_server()
    started = metric(server, "process_start_time_seconds")
    # The kernel counts in clock ticks (10 ms) and the launch is timed after Popen returns:
    # the start lies between the two, whereas the app is built only after the imports.
    assert before - 0.05 <= started <= server.launched_at, (before, started, server.launched_at)


@pytest.mark.e2e
def test_health_and_metrics_agree_on_a_live_server(
    start_server: Callable[..., ServerProcess],
) -> None:
    """Both read through one reader: with no traffic but this one kept-alive connection,
    /health's open_fds and /metrics' process_open_fds are the same number."""
    server = start_server()
    with httpx.Client(base_url=server.url, timeout=5) as http:
        for _ in range(10):
            first = http.get("/health").json()["process"]
            scraped = parse(http.get("/metrics").text)
            second = http.get("/health").json()["process"]
            if first["open_fds"] == second["open_fds"]:
                break  # nothing opened or closed meanwhile: the figures are comparable
            time.sleep(0.2)
    assert first["open_fds"] == second["open_fds"], "the server never went quiet"
    assert scraped.value("process_open_fds") == first["open_fds"]
    assert scraped.value("parley_threads") == first["threads"]
    rss = scraped.value("process_resident_memory_bytes") or 0
    assert abs(rss - first["rss_bytes"]) < 8 * 2**20
