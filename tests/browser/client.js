// Page script: Pipecat's official client (client-js + small-webrtc-transport) against Parley.
// Everything observed is kept on window for a driver (or a person with devtools) to read:
//   window.events  every RTVI event the client emits        [{t, event, data}]
//   window.wire    every data-channel message, both ways     [{t, dir: "in"|"out", data}]
//   window.audio   level of the bot's audio track            {rms, peak, loudFrames, frames}
//   window.harness {connect(mode), echo(payload), disconnect(), timings, state()}
import { PipecatClient, RTVIEvent } from "@pipecat-ai/client-js";
import { SmallWebRTCTransport, WavMediaManager } from "@pipecat-ai/small-webrtc-transport";

const t0 = performance.now();
const now = () => Math.round(performance.now() - t0);
const short = (v) => {
  try {
    return JSON.parse(JSON.stringify(v ?? null));
  } catch {
    return String(v);
  }
};

window.events = [];
window.wire = [];
window.audio = { rms: 0, peak: 0, loudFrames: 0, frames: 0 };

function show(line) {
  const log = document.getElementById("log");
  if (log) log.textContent += `${now()} ${line}\n`;
}

// Data-channel tap: outbound via send(), inbound via a listener on every channel the page creates.
const originalSend = RTCDataChannel.prototype.send;
RTCDataChannel.prototype.send = function (data) {
  window.wire.push({ t: now(), dir: "out", label: this.label, data: String(data) });
  return originalSend.call(this, data);
};
const originalCreate = RTCPeerConnection.prototype.createDataChannel;
RTCPeerConnection.prototype.createDataChannel = function (...args) {
  const channel = originalCreate.apply(this, args);
  channel.addEventListener("message", (e) =>
    window.wire.push({ t: now(), dir: "in", label: channel.label, data: String(e.data) }),
  );
  return channel;
};

// Bot audio level: WebAudio analyser on the remote track. The <audio> element stays muted
// (Chrome only feeds a remote stream to WebAudio while an element plays it; unmuted, echo
// cancellation would swallow the fake mic).
function measure(track) {
  const element = document.getElementById("bot-audio");
  const stream = new MediaStream([track]);
  element.srcObject = stream;
  const ctx = new AudioContext();
  const analyser = ctx.createAnalyser();
  analyser.fftSize = 2048;
  ctx.createMediaStreamSource(stream).connect(analyser);
  const buf = new Float32Array(analyser.fftSize);
  setInterval(() => {
    analyser.getFloatTimeDomainData(buf);
    let sum = 0;
    for (const x of buf) sum += x * x;
    const rms = Math.sqrt(sum / buf.length);
    const a = window.audio;
    a.rms = rms;
    a.peak = Math.max(a.peak, rms);
    a.frames += 1;
    if (rms > 0.01) {
      a.loudFrames += 1;
      a.firstLoudAt ??= now();
      a.lastLoudAt = now();
    }
  }, 50);
}

let client = null;
const timings = {};

function makeClient() {
  const c = new PipecatClient({
    transport: new SmallWebRTCTransport({ mediaManager: new WavMediaManager() }),
    enableMic: true,
    enableCam: false,
    callbacks: {
      onError: (m) => show(`error ${JSON.stringify(m)}`),
      onMessageError: (m) => show(`message error ${JSON.stringify(m)}`),
    },
  });
  for (const event of Object.values(RTVIEvent)) {
    c.on(event, (...args) => {
      window.events.push({ t: now(), event, data: short(args.length > 1 ? args : args[0]) });
      if (event !== RTVIEvent.LocalAudioLevel && event !== RTVIEvent.RemoteAudioLevel) show(event);
    });
  }
  c.on(RTVIEvent.TrackStarted, (track, participant) => {
    if (track.kind === "audio" && !participant?.local) measure(track);
  });
  c.on(RTVIEvent.TransportStateChanged, (s) => {
    const el = document.getElementById("state");
    if (el) el.textContent = s;
  });
  return c;
}

// mode "offer": POST/PATCH /api/offer. mode "start": POST /start, then /sessions/{id}/api/offer.
async function connect(mode = "offer") {
  client = makeClient();
  timings.connectStart = now();
  try {
    const ready =
      mode === "start"
        ? await client.startBotAndConnect({ endpoint: "/start", requestData: { harness: true } })
        : await client.connect({ webrtcRequestParams: { endpoint: "/api/offer" } });
    timings.botReady = now();
    return { ok: true, ms: timings.botReady - timings.connectStart, ready: short(ready) };
  } catch (e) {
    timings.connectFailed = now();
    return { ok: false, ms: timings.connectFailed - timings.connectStart, error: String(e?.message ?? e) };
  }
}

async function echo(payload = { hello: "world" }) {
  const start = now();
  try {
    const reply = await client.sendClientRequest("echo", payload, 5000);
    return { ok: true, ms: now() - start, reply: short(reply) };
  } catch (e) {
    return { ok: false, ms: now() - start, error: short(e?.data ?? e?.message ?? e) };
  }
}

async function disconnect() {
  const start = now();
  await client.disconnect();
  return { ms: now() - start };
}

window.harness = { connect, echo, disconnect, timings, state: () => client?.state ?? "none", client: () => client };

const bind = (id, fn) =>
  document.getElementById(id)?.addEventListener("click", async () => show(JSON.stringify(await fn())));
bind("connect", () => connect("offer"));
bind("start", () => connect("start"));
bind("echo", () => echo());
bind("disconnect", disconnect);
