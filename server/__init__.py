"""Parley server: HTTP signalling, sessions, WebRTC transport and RTVI."""

__version__ = "0.1.0"
