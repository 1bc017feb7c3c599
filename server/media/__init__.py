"""WebRTC media: the peer connection, inbound audio and video, the paced outbound track,
Opus, and the data channel."""
