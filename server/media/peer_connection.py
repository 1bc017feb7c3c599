"""A session's peer connection: made with the configured ICE servers, bundled on one
transport, and unwired after closing so that reference counting frees it."""

from __future__ import annotations

from typing import Any

from aiortc import RTCBundlePolicy, RTCConfiguration, RTCIceServer, RTCPeerConnection

from server.media import sctp_limits
from server.process.stats import watch_peer_connection
from server.settings import IceServer
from server.settings.limits_channel import ChannelLimitSettings

sctp_limits.install()  # bounds on what a peer can make SCTP hold (see that module)


def create_peer_connection(
    ice_servers: list[IceServer], limits: ChannelLimitSettings | None = None
) -> RTCPeerConnection:
    """A peer connection using only the configured ICE servers, bundled on one transport,
    its SCTP association held to ``limits`` (the defaults if None)."""
    servers = [
        RTCIceServer(urls=s.urls, username=s.username, credential=s.credential) for s in ice_servers
    ]
    config = RTCConfiguration(iceServers=servers, bundlePolicy=RTCBundlePolicy.MAX_BUNDLE)
    sctp = sctp_limits.SctpLimits.from_settings(limits)
    return watch_peer_connection(sctp_limits.LimitedPeerConnection(config, sctp))


def release_peer_connection(pc: RTCPeerConnection) -> None:
    """After ``pc.close()``: drop the event listeners of the peer connection and of
    everything it owns (transceivers, transports, ICE gatherers, data channels).

    aiortc wires these objects to each other, and sessions to them, with bound methods:
    a web of reference cycles that only Python's cyclic collector frees, and a full
    collection is rare. Until then a closed call keeps its buffers and codec state.
    Without the listeners, reference counting frees it as soon as the session goes.
    """
    pending: list[Any] = [pc, pc.sctp]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if hasattr(item, "remove_all_listeners"):
            item.remove_all_listeners()
        if item is pc:
            for transceiver in pc.getTransceivers():
                pending += [transceiver.sender, transceiver.receiver]
        for name in ("transport", "iceGatherer"):
            pending.append(getattr(item, name, None))
        channels = getattr(item, "_data_channels", None)  # the SCTP transport's
        if isinstance(channels, dict):
            pending += list(channels.values())
