// The page: wires a ParleyClient (parley.js) to the controls, the transcript, the event
// panel, the level meters and the latency readout. Read top to bottom.
import { ParleyClient } from "./parley.js";
import { UIWorker } from "./ui_worker.js";

const $ = (id) => document.getElementById(id);
const client = new ParleyClient();
window.parley = client; // handy in devtools
const ui = new UIWorker(client, { toasts: $("toasts") }); // the agent sees and drives this page
window.parleyUI = ui;

const MAX_EVENTS = 200;
// Level (RMS of samples in -1..1) above which the bot counts as audible: about -40 dBFS.
// The server sends digital silence between answers, so anything real is far above it.
const AUDIBLE = 0.01;
// These arrive many times a second and would drown the panel.
const QUIET_EVENTS = new Set(["user-audio-level", "bot-audio-level"]);

// -- status and errors -------------------------------------------------------------------

const STATUS_TEXT = { connecting: "Connecting…", connected: "Connected", disconnected: "Disconnected" };

client.on("state", (state) => {
  // A failure leaves "error" showing instead of a plain "disconnected".
  if (!(state === "disconnected" && $("status").dataset.state === "error")) {
    $("status").dataset.state = state;
    $("status").textContent = STATUS_TEXT[state];
  }
  const live = state !== "disconnected";
  $("connect").disabled = live;
  $("disconnect").disabled = !live;
  $("text-input").disabled = $("send").disabled = state !== "connected";
  if (!live) stopAudio();
});

// -- camera and screen: offered when the server's LLM can see ---------------------------------

client.on("video", ({ accepted }) => {
  $("camera").disabled = $("screen").disabled = !accepted;
});
client.on("state", (state) => state !== "connected" && ($("camera").disabled = $("screen").disabled = true));

function showSharing(button, on, label) {
  button.setAttribute("aria-pressed", String(on));
  button.textContent = on ? `Stop ${label}` : `Share ${label}`;
}

client.on("camera", (stream) => {
  showSharing($("camera"), !!stream, "camera");
  $("camera-preview").srcObject = stream;
  $("camera-preview").hidden = !stream;
});
client.on("screen", (stream) => showSharing($("screen"), !!stream, "screen"));

$("camera").onclick = () =>
  client
    .shareCamera($("camera").getAttribute("aria-pressed") !== "true")
    .catch((err) => showError(err.kind ?? "other", err.message));
$("screen").onclick = () =>
  client
    .shareScreen($("screen").getAttribute("aria-pressed") !== "true")
    .catch((err) => showError(err.kind ?? "other", err.message));

function showError(kind, text) {
  $("error").dataset.kind = kind;
  $("error").textContent = text;
  $("error").hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

/** One sentence a person can act on, for each way connecting can fail. */
function explain(err) {
  switch (err.kind) {
    case "mic-denied":
      return "Microphone permission denied: allow the microphone for this page, then connect again.";
    case "no-mic":
      return "No microphone found: plug one in, then connect again.";
    case "server-full":
      return `The server is full, retry in ${err.retryAfter ?? "a few"} s.`;
    case "http":
      return `The server refused the call (HTTP ${err.status}): ${err.message}`;
    default:
      return `Could not connect: ${err.message}`;
  }
}

function fail(kind, text) {
  showError(kind, text);
  $("status").dataset.state = "error";
  $("status").textContent = "Error";
}

client.on("lost", ({ reason }) => fail("lost", `Connection lost: ${reason}.`));
client.on("error", (data) => showError("rtvi", `Server error${data?.fatal ? " (fatal)" : ""}: ${data?.error}`));
client.on("error-response", (data) => showError("rtvi", `Request refused: ${data?.error}`));

// -- connect, disconnect, microphone ---------------------------------------------------------

$("connect").onclick = async () => {
  clearError();
  $("status").dataset.state = "idle";
  startAudio(); // inside the click: browsers only let a user gesture start audio
  resetReadouts();
  try {
    await client.connect({ micDeviceId: $("mic-select").value || undefined });
  } catch (err) {
    if (err.kind === "lost") return; // the "lost" handler has said so
    fail(err.kind ?? "other", explain(err));
  }
};

$("disconnect").onclick = () => client.disconnect();

$("mute").onclick = () => {
  const muted = $("mute").getAttribute("aria-pressed") !== "true";
  client.setMuted(muted);
  $("mute").setAttribute("aria-pressed", String(muted));
  $("mute").textContent = muted ? "Unmute mic" : "Mute mic";
};

// Silences the bot's voice here only; the analyser still measures it (it taps the track).
$("speaker").onclick = () => {
  const muted = ($("bot-audio").muted = !$("bot-audio").muted);
  $("speaker").setAttribute("aria-pressed", String(muted));
  $("speaker").textContent = muted ? "Unmute bot" : "Mute bot";
};

$("mic-select").onchange = () =>
  client.switchMic($("mic-select").value).catch((err) => showError(err.kind ?? "other", explain(err)));

async function listMics() {
  // Before the first getUserMedia grant, labels (and often ids) are empty.
  const mics = (await navigator.mediaDevices.enumerateDevices()).filter((d) => d.kind === "audioinput");
  const select = $("mic-select");
  const current = client.micStream?.getAudioTracks()[0]?.getSettings().deviceId ?? select.value;
  select.replaceChildren(...mics.map((d, i) => new Option(d.label || `Microphone ${i + 1}`, d.deviceId)));
  if (mics.some((d) => d.deviceId === current)) select.value = current;
}
navigator.mediaDevices.addEventListener("devicechange", listMics);
listMics();

// -- transcript ------------------------------------------------------------------------------

// The bot line still being spoken; a user line, a new answer or an interruption ends it.
let botLine = null;

function addLine(who, text = "") {
  const li = document.createElement("li");
  li.className = who;
  li.textContent = text;
  $("transcript").append(li);
  li.scrollIntoView({ block: "nearest" });
  return li;
}

function userSaid(text) {
  botLine = null;
  const last = $("transcript").lastElementChild;
  if (last?.classList.contains("user")) last.textContent += ` ${text}`; // same turn, more words
  else addLine("user", text);
}

function currentBotLine() {
  if (!botLine) {
    botLine = addLine("bot");
    // .said: text that was played out; .caption: the sentence playing right now, its
    // .heard part (the words played so far) and the rest.
    botLine.innerHTML =
      '<span class="said"></span> <span class="caption"><span class="heard"></span><span class="rest"></span></span>';
  }
  return botLine;
}

function showCaption(heard, rest) {
  const caption = currentBotLine().querySelector(".caption");
  caption.querySelector(".heard").textContent = heard;
  caption.querySelector(".rest").textContent = rest;
}

function addSaid(text) {
  const said = currentBotLine().querySelector(".said");
  said.textContent += (said.textContent ? " " : "") + text;
}

client.on("user-transcription", (data) => data.final && userSaid(data.text)); // interim: skipped
client.on("bot-llm-started", () => (botLine = null));
// RTVI 2.1 bot-output (the page announces 2.1.0): a spoken sentence comes as "new" when it
// starts to play (the caption), "in-progress" as playout reaches each word (the caption's
// heard part grows), "completed" once played (it joins what was said); text that is not
// spoken comes a sentence at a time, with will_be_spoken false.
client.on("bot-output", (data) => {
  if (!data.will_be_spoken) return addSaid(data.text);
  const progress = data.spoken_progress ?? { accumulated_text: "", remaining_text: data.text };
  if (data.spoken_status === "completed") {
    addSaid(data.text);
    showCaption("", "");
  } else {
    showCaption(progress.accumulated_text, progress.remaining_text);
  }
});
client.on("bot-interrupted", () => {
  if (!botLine) return;
  // What was heard of the sentence cut short stays; the part never heard goes.
  const heard = botLine.querySelector(".caption .heard").textContent;
  if (heard) addSaid(heard);
  showCaption("", "");
  botLine.classList.add("interrupted");
  botLine = null;
});

$("send-text").onsubmit = (e) => {
  e.preventDefault();
  const text = $("text-input").value.trim();
  if (!text) return;
  client.sendText(text);
  userSaid(text);
  $("text-input").value = "";
};

// -- RTVI event panel ------------------------------------------------------------------------

let connectedAt = performance.now();
client.on("state", (s) => s === "connecting" && (connectedAt = performance.now()));

client.on("message", ({ type, data }) => {
  if (QUIET_EVENTS.has(type)) return;
  const li = document.createElement("li");
  li.className = type;
  const json = data === undefined ? "" : JSON.stringify(data);
  const seconds = ((performance.now() - connectedAt) / 1000).toFixed(3);
  li.innerHTML = `<time>${seconds}</time><b></b><code></code>`;
  li.querySelector("b").textContent = type;
  li.querySelector("code").textContent = json.length > 160 ? `${json.slice(0, 160)}…` : json;
  $("events").prepend(li);
  if ($("events").children.length > MAX_EVENTS) $("events").lastElementChild.remove();
});

// -- audio: meters and latency -----------------------------------------------------------------

let audioCtx = null;
let micAnalyser = null;
let botAnalyser = null;

function startAudio() {
  audioCtx ??= new AudioContext();
  audioCtx.resume();
}

function stopAudio() {
  micAnalyser = botAnalyser = null;
  for (const id of ["mic-level", "bot-level"]) $(id).value = 0;
}

function analyse(stream) {
  const analyser = audioCtx.createAnalyser();
  analyser.fftSize = 1024; // ~21 ms at 48 kHz: about one animation frame of audio
  audioCtx.createMediaStreamSource(stream).connect(analyser); // not to the speakers
  analyser.samples = new Float32Array(analyser.fftSize);
  return analyser;
}

function rms(analyser) {
  if (!analyser) return 0;
  analyser.getFloatTimeDomainData(analyser.samples);
  let sum = 0;
  for (const x of analyser.samples) sum += x * x;
  return Math.sqrt(sum / analyser.samples.length);
}

function showLevel(meter, level) {
  // Meters in dB read like a VU meter: -60 dBFS (or quieter) is empty, 0 dBFS full.
  meter.value = Math.max(0, 1 + (20 * Math.log10(level + 1e-9)) / 60);
  if (level > Number(meter.dataset.peak ?? 0)) meter.dataset.peak = level.toFixed(4);
}

client.on("mic", (stream) => {
  micAnalyser = analyse(stream);
  listMics(); // labels are readable now that the microphone is granted
});

client.on("track", (track) => {
  const stream = new MediaStream([track]);
  // The element plays the voice; Chrome also feeds a remote stream to WebAudio only while
  // an element plays it. We measure with an analyser: the element offers no levels.
  $("bot-audio").srcObject = stream;
  botAnalyser = analyse(stream);
});

// One turn's timing: from user-stopped-speaking to the first audible bot audio here
// (what the person hears), and to the server's bot-started-speaking (when it began playout).
let turn = null;
let turns = 0;

function resetReadouts() {
  turn = null;
  turns = 0;
  $("latency").replaceChildren();
  for (const id of ["mic-level", "bot-level"]) delete $(id).dataset.peak;
}

client.on("user-stopped-speaking", () => {
  turn = { n: ++turns, stoppedAt: performance.now(), heardMs: null, serverMs: null };
  turn.li = document.createElement("li");
  $("latency").prepend(turn.li);
  renderTurn(turn);
});

client.on("bot-started-speaking", () => {
  if (turn && turn.serverMs === null) renderTurn(turn, "serverMs");
});

function renderTurn(t, mark) {
  if (mark) t[mark] = Math.round(performance.now() - t.stoppedAt);
  const heard = t.heardMs === null ? "waiting for the bot…" : `${t.heardMs} ms`;
  const server = t.serverMs === null ? "" : ` · server bot-started-speaking after ${t.serverMs} ms`;
  t.li.innerHTML = `Turn ${t.n}: <span class="heard"></span><span class="server"></span>`;
  t.li.querySelector(".heard").textContent = heard;
  t.li.querySelector(".server").textContent = server;
  if (t.heardMs !== null) t.li.dataset.ms = t.heardMs;
}

// Meters and the latency probe run once per frame (paused in hidden tabs, like all rAF).
function tick() {
  const bot = rms(botAnalyser);
  showLevel($("mic-level"), rms(micAnalyser));
  showLevel($("bot-level"), bot);
  if (turn && turn.heardMs === null && bot > AUDIBLE) renderTurn(turn, "heardMs");
  requestAnimationFrame(tick);
}
requestAnimationFrame(tick);

// -- notes: a small form the agent can fill in and save ------------------------------------

$("note-form").onsubmit = (e) => {
  e.preventDefault();
  const title = $("note-title").value.trim();
  if (!title) return;
  const li = document.createElement("li");
  li.textContent = $("note-body").value.trim() ? `${title}: ${$("note-body").value.trim()}` : title;
  $("note-list").append(li);
  $("note-title").value = $("note-body").value = "";
};

// -- job groups (ui-job-group): one line per group, one chip per job --------------------------

const jobGroups = new Map(); // job_id -> {li, workers: Map(name -> chip)}

client.on("ui-job-group", (data) => {
  if (data.kind === "group_started") {
    const li = document.createElement("li");
    li.dataset.jobId = data.job_id;
    li.innerHTML = '<b></b> <span class="workers"></span> ';
    li.querySelector("b").textContent = data.label ?? "jobs";
    const workers = new Map();
    for (const name of data.workers ?? []) {
      const chip = document.createElement("span");
      chip.className = "job";
      chip.dataset.status = "running";
      chip.textContent = name;
      li.querySelector(".workers").append(chip, " ");
      workers.set(name, chip);
    }
    if (data.cancellable) {
      const cancel = document.createElement("button");
      cancel.textContent = "Cancel";
      cancel.onclick = () => ui.cancelJobGroup(data.job_id);
      li.append(cancel);
    }
    $("jobs").prepend(li);
    jobGroups.set(data.job_id, { li, workers });
    return;
  }
  const group = jobGroups.get(data.job_id);
  if (!group) return;
  const chip = group.workers.get(data.worker_name);
  if (data.kind === "job_update" && chip) {
    chip.title = JSON.stringify(data.data);
  } else if (data.kind === "job_completed" && chip) {
    chip.dataset.status = data.status;
    chip.title = JSON.stringify(data.response);
  } else if (data.kind === "group_completed") {
    group.li.classList.add("done");
    group.li.querySelector("button")?.remove();
    jobGroups.delete(data.job_id);
  }
});
