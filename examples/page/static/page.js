// The page's side of examples/page: a small WebRTC + RTVI client (the wire contract of the
// bundled static/parley.js, cut down to what this page needs) that runs the agent's
// client-side tools and shows its UI commands.
//
//   1. Microphone, one sendrecv audio transceiver and a `chat` data channel; the offer goes
//      to POST /api/offer once ICE gathering is done (so no candidates to trickle).
//   2. On the open channel: `ping: <ms>` every second, RTVI `client-ready` → `bot-ready`.
//   3. `llm-function-call-in-progress` for a tool in TOOLS → run it, answer with
//      `llm-function-call-result`; `ui-command` → COMMANDS.

const RTVI = "rtvi-ai";
const $ = (id) => document.getElementById(id);

// The client-side tools agent.py declares (settings.client_tools): name → fn(arguments),
// whose return value (an object or a string) is the result the LLM reads.
const TOOLS = {
  show_product({ product_id }) {
    const card = document.querySelector(`.product#${CSS.escape(product_id)}`);
    if (!card) return { error: `there is no product ${product_id} on this page` };
    for (const other of document.querySelectorAll(".product")) other.classList.toggle("shown", other === card);
    card.scrollIntoView({ behavior: "smooth", block: "center" });
    return { shown: product_id, name: card.dataset.name, price: Number(card.dataset.price) };
  },
  set_theme({ theme }) {
    document.documentElement.dataset.theme = theme;
    return { theme };
  },
};

// UI commands the server sends (ctx.send_ui_command(command, payload)): command → fn(payload).
const COMMANDS = {
  toast({ title, description, duration_ms = 5000 }) {
    const toast = document.createElement("div");
    toast.className = "toast";
    toast.append(Object.assign(document.createElement("strong"), { textContent: title }));
    if (description) toast.append(document.createElement("br"), description);
    $("toasts").append(toast);
    setTimeout(() => toast.remove(), duration_ms);
  },
};

let pc = null;
let channel = null;
let pingTimer = null;
let nextId = 1;
let botLine = null;

function send(type, data) {
  const id = `page-${nextId++}`;
  channel.send(JSON.stringify({ label: RTVI, type, id, ...(data !== undefined && { data }) }));
  return id;
}

async function runTool({ tool_call_id, function_name, arguments: args = {} }) {
  let result;
  try {
    result = await TOOLS[function_name](args);
  } catch (err) {
    result = { error: `${function_name} failed on the page: ${err.message ?? err}` };
  }
  send("llm-function-call-result", { function_name, tool_call_id, arguments: args, result });
}

function receive(text) {
  let msg;
  try {
    msg = JSON.parse(text);
  } catch {
    return;
  }
  if (msg.type === "signalling" && msg.message?.type === "peerLeft") return hangUp("Call ended");
  if (msg.label !== RTVI) return;
  const { type, data } = msg;
  if (type === "bot-ready") setConnected(true);
  // A server tool's call is announced too; only the page's own tools are run here.
  else if (type === "llm-function-call-in-progress" && data.function_name in TOOLS) runTool(data);
  else if (type === "ui-command") COMMANDS[data.command]?.(data.payload ?? {});
  else if (type === "user-transcription" && data.final) addLine("user", data.text);
  else if (type === "bot-llm-started") botLine = null;
  else if (type === "bot-output") {
    // RTVI 2.1: a spoken sentence comes as "new", "in-progress" per word, then "completed";
    // text that is not spoken comes once, will_be_spoken false. Each sentence shows once.
    if (data.will_be_spoken && data.spoken_status !== "completed") return;
    botLine ??= addLine("bot", "");
    botLine.textContent += (botLine.textContent ? " " : "") + data.text;
  }
}

async function call() {
  $("call").disabled = true;
  $("status").textContent = "Connecting…";
  try {
    const mic = await navigator.mediaDevices.getUserMedia({ audio: true });
    pc = new RTCPeerConnection();
    pc.addTransceiver(mic.getAudioTracks()[0], { direction: "sendrecv", streams: [mic] });
    pc.ontrack = (e) => ($("bot-audio").srcObject = new MediaStream([e.track]));
    channel = pc.createDataChannel("chat", { ordered: true });
    channel.onmessage = (e) => receive(e.data);
    channel.onopen = () => {
      pingTimer = setInterval(() => channel.send(`ping: ${Date.now()}`), 1000);
      send("client-ready", { version: "2.1.0", about: { library: "spoke-and-chain-page", library_version: "1" } });
    };
    await pc.setLocalDescription(await pc.createOffer());
    await iceGathered(pc);
    const res = await fetch("/api/offer", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sdp: pc.localDescription.sdp, type: "offer", pc_id: null, restart_pc: false }),
    });
    if (!res.ok) throw new Error(`${res.status} ${(await res.json().catch(() => ({}))).error ?? res.statusText}`);
    const answer = await res.json();
    await pc.setRemoteDescription({ type: "answer", sdp: answer.sdp });
  } catch (err) {
    hangUp(`Could not connect: ${err.message}`);
  }
}

function iceGathered(peer, ms = 3000) {
  // Host candidates take milliseconds; the cap keeps a slow interface from stalling the call.
  return new Promise((resolve) => {
    if (peer.iceGatheringState === "complete") return resolve();
    peer.addEventListener("icegatheringstatechange", () => peer.iceGatheringState === "complete" && resolve());
    setTimeout(resolve, ms);
  });
}

function hangUp(status) {
  clearInterval(pingTimer);
  for (const sender of pc?.getSenders() ?? []) sender.track?.stop();
  pc?.close();
  pc = channel = null;
  setConnected(false, status);
}

function setConnected(on, status = on ? "Connected" : "Not connected") {
  $("status").textContent = status;
  $("status").dataset.state = on ? "connected" : "idle";
  $("call").disabled = false;
  $("call").textContent = on ? "Hang up" : "Talk to the shop";
  for (const el of $("say").elements) el.disabled = !on;
}

function addLine(who, text) {
  const li = Object.assign(document.createElement("li"), { className: who, textContent: text });
  $("transcript").append(li);
  li.scrollIntoView({ block: "nearest" });
  return li;
}

$("call").onclick = () => (pc ? (send("disconnect-bot"), hangUp("Call ended")) : call());
$("say").onsubmit = (e) => {
  e.preventDefault();
  const content = $("text").value.trim();
  if (!content || !channel) return;
  send("send-text", { content, options: { run_immediately: true, audio_response: true } });
  addLine("user", content);
  botLine = null;
  $("text").value = "";
};
