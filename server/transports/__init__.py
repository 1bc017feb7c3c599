"""How a call reaches us: the transport interface (:mod:`.base`) and its implementations,
WebRTC (:mod:`.webrtc`), a telephony provider's media stream (:mod:`.phone`) and plain
PCM over a WebSocket (:mod:`.pcm_socket`)."""
