// A small client for a Parley server: WebRTC audio both ways, RTVI messages over the `chat`
// data channel. No UI here; app.js is the page that uses it. The wire contract it follows
// is the one Pipecat's SmallWebRTC transport speaks:
//
//   1. getUserMedia, then an offer with one sendrecv audio transceiver and a `chat` channel.
//   2. POST /api/offer {sdp, type, pc_id: null, restart_pc: false} -> {sdp, type, pc_id}.
//   3. Our ICE candidates trickle to PATCH /api/offer {pc_id, candidates: [...]} in batches,
//      an empty candidate marking the end. (The server answers with all of its own.)
//   4. On the open channel: `ping: <ms>` every second, and RTVI `client-ready` announcing
//      protocol 2.1.0; the session is usable once `bot-ready` comes back with the same id.
//
// Events (client.on(name, fn)):
//   "state"      "connecting" | "connected" | "disconnected"
//   "track"      the bot's remote audio MediaStreamTrack
//   "mic"        the local MediaStream (again after switchMic)
//   "video"      {accepted}: whether the server takes our camera/screen (an LLM that sees)
//   "camera"     the shared camera's MediaStream, or null when it stops; "screen" likewise
//   "lost"       {reason}: the connection ended without us asking
//   "message"    every RTVI message from the server; also emitted under its own type,
//                e.g. client.on("bot-output", data => ...), with (data, message)

const RTVI_LABEL = "rtvi-ai";
const PING_MS = 1000;
const CANDIDATE_BATCH_MS = 200;
const BOT_READY_TIMEOUT_MS = 10000;

/** An HTTP or setup failure, with what the page needs to explain it. */
export class ParleyError extends Error {
  constructor(message, { kind, status, retryAfter } = {}) {
    super(message);
    this.kind = kind; // "mic-denied" | "no-mic" | "camera-denied" | "no-camera" | "server-full" | "http" | "timeout" | "lost"
    this.status = status;
    this.retryAfter = retryAfter; // seconds, for "server-full"
  }
}

export class ParleyClient {
  constructor({ baseUrl = "", offerPath = "/api/offer" } = {}) {
    this.offerUrl = baseUrl + offerPath;
    this.listeners = new Map();
    this.state = "disconnected";
    this.pc = null;
    this.channel = null;
    this.pcId = null;
    this.micStream = null;
    this.videoAccepted = false;
    this.video = { camera: null, screen: null }; // {transceiver, stream} while connected
    this.muted = false;
    this.nextId = 1;
    this.outbox = []; // messages sent before the channel opened
    this.candidates = []; // ICE candidates waiting for the next PATCH
    this.candidateTimer = null;
    this.pingTimer = null;
    this.closing = false; // we asked to end: closures from now on are not "lost"
    // Closing the tab: tell the server, best effort (it also notices the pings stop).
    addEventListener("pagehide", () => this.disconnect({ wait: false }));
  }

  // -- events ------------------------------------------------------------------------------

  on(name, fn) {
    if (!this.listeners.has(name)) this.listeners.set(name, new Set());
    this.listeners.get(name).add(fn);
    return () => this.listeners.get(name).delete(fn);
  }

  emit(name, ...args) {
    for (const fn of this.listeners.get(name) ?? []) fn(...args);
  }

  setState(state) {
    this.state = state;
    this.emit("state", state);
  }

  // -- connecting --------------------------------------------------------------------------

  async connect({ micDeviceId } = {}) {
    if (this.pc) throw new Error("already connected");
    this.closing = false;
    this.setState("connecting");
    try {
      this.micStream = await getMic(micDeviceId);
      this.emit("mic", this.micStream);
      const pc = (this.pc = new RTCPeerConnection({ bundlePolicy: "max-bundle" }));
      const [track] = this.micStream.getAudioTracks();
      track.enabled = !this.muted;
      pc.addTransceiver(track, { direction: "sendrecv", streams: [this.micStream] });
      // Camera (mid 1) and screen (mid 2), as Pipecat's client offers them: sending
      // nothing until shared, so sharing later needs no renegotiation.
      for (const source of ["camera", "screen"]) {
        this.video[source] = { transceiver: pc.addTransceiver("video", { direction: "sendrecv" }), stream: null };
      }
      this.openChannel(pc.createDataChannel("chat", { ordered: true }));
      pc.ontrack = (e) => e.track.kind === "audio" && this.emit("track", e.track);
      pc.onicecandidate = (e) => this.queueCandidate(e.candidate);
      pc.onconnectionstatechange = () => {
        if (pc === this.pc && ["failed", "disconnected"].includes(pc.connectionState)) {
          this.lost(`peer connection ${pc.connectionState}`);
        }
      };

      // Send the offer at once; candidates gathered meanwhile are trickled after the answer.
      await pc.setLocalDescription(await pc.createOffer());
      const answer = await this.http("POST", {
        sdp: pc.localDescription.sdp,
        type: "offer",
        pc_id: null,
        restart_pc: false,
      });
      this.pcId = answer.pc_id;
      await pc.setRemoteDescription({ type: "answer", sdp: answer.sdp });
      this.flushCandidates();
      // The server answers video recvonly only when its LLM can see (else inactive).
      this.videoAccepted = this.video.camera.transceiver.currentDirection === "sendonly";
      this.emit("video", { accepted: this.videoAccepted });

      const about = { library: "parley-web", library_version: "0.1.0", platform: navigator.userAgent };
      const id = this.send("client-ready", { version: "2.1.0", about });
      await this.waitFor((m) => m.type === "bot-ready" && m.id === id, BOT_READY_TIMEOUT_MS);
      this.setState("connected");
    } catch (err) {
      this.close();
      throw err;
    }
  }

  /** POST or PATCH the offer endpoint; non-2xx becomes a ParleyError. */
  async http(method, body) {
    const res = await fetch(this.offerUrl, {
      method,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (res.ok) return res.json();
    // The server answers every error as JSON {error, detail}; fall back to the status line.
    const text = await res.text();
    let message = `${res.status} ${res.statusText}`;
    try {
      message = JSON.parse(text).error ?? message;
    } catch {}
    if (res.status === 503) {
      const retryAfter = Number(res.headers.get("Retry-After")) || null;
      throw new ParleyError(message, { kind: "server-full", status: 503, retryAfter });
    }
    throw new ParleyError(message, { kind: "http", status: res.status });
  }

  queueCandidate(candidate) {
    // null = gathering finished: the server takes an empty candidate as end-of-candidates.
    this.candidates.push({
      candidate: candidate?.candidate ?? "",
      sdp_mid: candidate?.sdpMid ?? "0",
      sdp_mline_index: candidate?.sdpMLineIndex ?? 0,
    });
    // Before the answer there is no pc_id to PATCH: keep them until flushCandidates().
    if (this.pcId && !this.candidateTimer) {
      this.candidateTimer = setTimeout(() => this.flushCandidates(), CANDIDATE_BATCH_MS);
    }
  }

  flushCandidates() {
    clearTimeout(this.candidateTimer);
    this.candidateTimer = null;
    if (!this.candidates.length || !this.pc) return;
    const candidates = this.candidates.splice(0);
    this.http("PATCH", { pc_id: this.pcId, candidates }).catch((err) =>
      console.warn("sending ICE candidates failed:", err),
    );
  }

  // -- the data channel --------------------------------------------------------------------

  openChannel(channel) {
    this.channel = channel;
    channel.onopen = () => {
      for (const text of this.outbox.splice(0)) channel.send(text);
      // The channel can close before the timer is cleared (the server hangs up first).
      this.pingTimer = setInterval(() => {
        if (channel.readyState === "open") channel.send(`ping: ${Date.now()}`);
      }, PING_MS);
    };
    // Only the current channel counts (an old one may report its close after a reconnect).
    channel.onclose = () => channel === this.channel && this.lost("data channel closed");
    channel.onmessage = (e) => this.receive(e.data);
  }

  receive(text) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      return; // not JSON: nothing the server sends us today
    }
    if (msg.type === "signalling") {
      if (msg.message?.type === "peerLeft") this.lost("the server ended the session");
      return;
    }
    if (msg.label !== RTVI_LABEL) return;
    this.emit("message", msg);
    this.emit(msg.type, msg.data, msg);
  }

  sendRaw(obj) {
    const text = JSON.stringify(obj);
    if (this.channel?.readyState === "open") this.channel.send(text);
    else this.outbox.push(text);
  }

  /** Send one RTVI message; returns its id (replies carry the same id). */
  send(type, data) {
    const id = `parley-${this.nextId++}`;
    this.sendRaw({ label: RTVI_LABEL, type, id, ...(data !== undefined && { data }) });
    return id;
  }

  /** Resolve with the first RTVI message matching `match`; reject after `ms` or on close. */
  waitFor(match, ms) {
    return new Promise((resolve, reject) => {
      const done = (fn, value) => {
        clearTimeout(timer);
        offMessage();
        offState();
        fn(value);
      };
      const timer = setTimeout(() => done(reject, new ParleyError("the server did not answer", { kind: "timeout" })), ms);
      const offMessage = this.on("message", (msg) => match(msg) && done(resolve, msg));
      const closed = () => new ParleyError(`connection lost: ${this.lostReason}`, { kind: "lost" });
      const offState = this.on("state", (s) => s === "disconnected" && done(reject, closed()));
    });
  }

  /** Say something by text; the bot answers as if it had been spoken. */
  sendText(content) {
    return this.send("send-text", { content, options: { run_immediately: true, audio_response: true } });
  }

  /** Press keypad keys ("12#"): RTVI 2.1 `dtmf`, taken as a phone caller's keys are. */
  sendDTMF(keys) {
    if (!/^[0-9*#]+$/.test(keys)) throw new Error(`not keypad keys: ${keys}`);
    return this.send("dtmf", { buttons: [...keys] });
  }

  // -- the microphone ----------------------------------------------------------------------

  setMuted(muted) {
    this.muted = muted;
    // A disabled track keeps sending (silent) frames: no renegotiation, instant unmute.
    for (const track of this.micStream?.getAudioTracks() ?? []) track.enabled = !muted;
    // Tell the server too, the way Pipecat's client does.
    if (this.channel) {
      this.sendRaw({ type: "signalling", message: { type: "trackStatus", receiver_index: 0, enabled: !muted } });
    }
  }

  /** Use another microphone; while connected, swap the sent track without renegotiating. */
  async switchMic(deviceId) {
    if (!this.pc) return;
    const stream = await getMic(deviceId);
    const [track] = stream.getAudioTracks();
    track.enabled = !this.muted;
    const sender = this.pc.getSenders().find((s) => s.track?.kind === "audio");
    await sender.replaceTrack(track);
    stopTracks(this.micStream);
    this.micStream = stream;
    this.emit("mic", stream);
  }

  // -- camera and screen ---------------------------------------------------------------------

  /** Share the camera (`on`) or stop sharing it; the server's LLM may then look at it. */
  async shareCamera(on) {
    const stream = on ? await getCamera() : null;
    await this.shareVideo("camera", stream, 1);
  }

  /** Share a screen, window or tab (`on`), or stop; the browser asks which. */
  async shareScreen(on) {
    let stream = null;
    if (on) {
      try {
        stream = await navigator.mediaDevices.getDisplayMedia({ video: true, audio: false });
      } catch (err) {
        if (err.name === "NotAllowedError") return; // the user chose nothing
        throw err;
      }
      // Stopped from the browser's own "Stop sharing" bar.
      stream.getVideoTracks()[0].onended = () => this.shareVideo("screen", null, 2);
    }
    await this.shareVideo("screen", stream, 2);
  }

  async shareVideo(source, stream, receiverIndex) {
    const slot = this.video[source];
    if (!this.pc || !slot?.transceiver) {
      stopTracks(stream);
      throw new Error("not connected");
    }
    await slot.transceiver.sender.replaceTrack(stream?.getVideoTracks()[0] ?? null);
    stopTracks(slot.stream);
    slot.stream = stream;
    if (this.channel) {
      this.sendRaw({ type: "signalling", message: { type: "trackStatus", receiver_index: receiverIndex, enabled: !!stream } });
    }
    this.emit(source, stream);
  }

  // -- ending ------------------------------------------------------------------------------

  /** Hang up: `disconnect-bot`, then close the peer connection. */
  async disconnect({ wait = true } = {}) {
    if (!this.pc) return;
    this.closing = true;
    if (this.channel?.readyState === "open") {
      this.sendRaw({ label: RTVI_LABEL, type: "disconnect-bot", id: `parley-${this.nextId++}` });
      // send() only queues; closing at once could drop the message. Give it a moment.
      for (let i = 0; wait && i < 25 && this.channel.bufferedAmount > 0; i++) await sleep(20);
    }
    this.close();
  }

  lost(reason) {
    if (this.closing || !this.pc) return;
    this.lostReason = reason;
    this.close();
    this.emit("lost", { reason });
  }

  close() {
    this.closing = true;
    clearInterval(this.pingTimer);
    clearTimeout(this.candidateTimer);
    this.pc?.close();
    stopTracks(this.micStream);
    for (const source of ["camera", "screen"]) {
      if (this.video[source]?.stream) {
        stopTracks(this.video[source].stream);
        this.emit(source, null);
      }
    }
    Object.assign(this, { pc: null, channel: null, pcId: null, micStream: null, outbox: [], candidates: [] });
    this.video = { camera: null, screen: null };
    this.videoAccepted = false;
    this.setState("disconnected");
  }
}

async function getMic(deviceId) {
  try {
    return await navigator.mediaDevices.getUserMedia({
      audio: deviceId ? { deviceId: { exact: deviceId } } : true,
    });
  } catch (err) {
    if (err.name === "NotAllowedError" || err.name === "SecurityError") {
      throw new ParleyError("microphone permission denied", { kind: "mic-denied" });
    }
    if (err.name === "NotFoundError" || err.name === "OverconstrainedError") {
      throw new ParleyError("no microphone found", { kind: "no-mic" });
    }
    throw err;
  }
}

async function getCamera() {
  try {
    // Small on purpose: the server sends the LLM at most 512 px on the long side.
    return await navigator.mediaDevices.getUserMedia({ video: { width: { ideal: 640 }, height: { ideal: 480 } } });
  } catch (err) {
    if (err.name === "NotAllowedError" || err.name === "SecurityError") {
      throw new ParleyError("camera permission denied", { kind: "camera-denied" });
    }
    if (err.name === "NotFoundError" || err.name === "OverconstrainedError") {
      throw new ParleyError("no camera found", { kind: "no-camera" });
    }
    throw err;
  }
}

function stopTracks(stream) {
  for (const track of stream?.getTracks() ?? []) track.stop();
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
