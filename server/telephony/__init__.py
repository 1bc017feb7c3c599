"""Phone calls: telephony providers' media-stream WebSockets (issue 26)."""
