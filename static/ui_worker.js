// The page's side of the UI worker protocol: it lets the agent see this page and act on it.
//
//   ui-snapshot  (to the server)  a compact accessibility tree of the page, each element with
//                                 a ref ("e12"), [data-view] ones with their view name; sent on
//                                 connect and after changes (throttled, and only when something
//                                 the tree shows did change)
//   ui-event     (to the server)  "click" {ref, name} on buttons and links, "navigate" {view}
//   ui-command   (from the server) toast, navigate, highlight, focus, click, select_text,
//                                 set_input_value; worker.register(name, fn) adds others
//   ui-job-group (from the server) shown by app.js; cancelJobGroup(jobId) stops one
//
// Elements inside [data-ui-skip] are neither described nor watched (the event log, the meters).

const SNAPSHOT_THROTTLE_MS = 400;
const MAX_NODES = 300;
const MAX_LIST_ITEMS = 30; // long lists (the transcript) keep their newest items
const MAX_TEXT = 100;
const TOAST_MS = 4000;
const HIGHLIGHT_MS = 2500;

const LANDMARKS = { NAV: "navigation", MAIN: "main", HEADER: "banner", FOOTER: "contentinfo", ASIDE: "complementary", FORM: "form" };
const TEXT_ROLES = new Set(["button", "link", "heading", "listitem", "paragraph", "status", "alert", "option", "tab", "cell"]);
const INPUT_ROLES = { checkbox: "checkbox", radio: "radio", range: "slider", button: "button", submit: "button", search: "searchbox" };

function cut(text, limit = MAX_TEXT) {
  text = (text ?? "").replace(/\s+/g, " ").trim();
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

function roleOf(el) {
  const explicit = el.getAttribute("role");
  if (explicit) return explicit.split(" ")[0];
  const tag = el.tagName;
  if (/^H[1-6]$/.test(tag)) return "heading";
  if (tag === "A") return el.hasAttribute("href") ? "link" : null;
  if (tag === "BUTTON") return "button";
  if (tag === "INPUT") return el.type === "hidden" ? null : (INPUT_ROLES[el.type] ?? "textbox");
  if (tag === "TEXTAREA") return "textbox";
  if (tag === "SELECT") return "combobox";
  if (tag === "SECTION") return el.hasAttribute("aria-label") || el.hasAttribute("aria-labelledby") ? "region" : null;
  if (tag === "UL" || tag === "OL") return "list";
  if (tag === "LI") return "listitem";
  if (tag === "P") return "paragraph";
  if (tag === "METER") return "meter";
  if (tag === "IMG") return "img";
  return LANDMARKS[tag] ?? null;
}

function nameOf(el, role) {
  const label = el.getAttribute("aria-label");
  if (label) return cut(label);
  if (el.labels?.length) return cut(labelText(el.labels[0]));
  if (role === "img") return cut(el.alt);
  if (TEXT_ROLES.has(role)) return cut(el.innerText);
  if (role === "textbox" || role === "searchbox") return cut(el.placeholder);
  return "";
}

/** A label's own words, without those of the control it wraps (a select's options). */
function labelText(label) {
  const own = [...label.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent);
  return own.join(" ").trim() || label.innerText;
}

function hidden(el) {
  return el.hidden || el.getAttribute("aria-hidden") === "true" || el.closest("[data-ui-skip]") !== null ||
    ["SCRIPT", "STYLE", "TEMPLATE", "AUDIO"].includes(el.tagName) || el.getClientRects().length === 0;
}

export class UIWorker {
  constructor(client, { root = document.body, toasts = null } = {}) {
    this.client = client;
    this.root = root;
    this.toasts = toasts; // where toasts go (created on first use if null)
    this.refs = new WeakMap(); // element -> ref, stable for the page's lifetime
    this.elements = new Map(); // ref -> element, as of the last snapshot
    this.nextRef = 1;
    this.lastSent = "";
    this.lastAt = 0;
    this.timer = null;
    this.handlers = {
      toast: (p) => this.toast(p),
      navigate: (p) => this.navigate(p),
      highlight: (p) => this.highlight(p),
      focus: (p) => this.target(p)?.focus(),
      click: (p) => this.click(p),
      select_text: (p) => this.selectText(p),
      set_input_value: (p) => this.setInputValue(p),
    };
    client.on("ui-command", (data) => this.run(data?.command, data?.payload ?? {}));
    client.on("state", (state) => {
      if (state === "connected") {
        this.lastSent = "";
        setTimeout(() => this.sendSnapshot()); // after the page has shown the new state
      }
    });
    const changed = () => this.schedule();
    new MutationObserver((records) => records.some((r) => this.watched(r.target)) && changed()).observe(root, {
      subtree: true,
      childList: true,
      characterData: true,
      attributes: true,
      attributeFilter: ["disabled", "hidden", "aria-pressed", "aria-expanded", "aria-label", "aria-hidden", "checked"],
    });
    for (const type of ["focusin", "focusout", "input", "change"]) root.addEventListener(type, changed, true);
    document.addEventListener("selectionchange", changed);
    root.addEventListener("click", (e) => this.clicked(e), true);
    addEventListener("hashchange", () => this.event("navigate", { view: decodeURIComponent(location.hash.slice(1)) }));
  }

  // -- ui-snapshot -----------------------------------------------------------------------

  refOf(el) {
    let ref = this.refs.get(el);
    if (!ref) this.refs.set(el, (ref = `e${this.nextRef++}`));
    return ref;
  }

  watched(node) {
    const el = node.nodeType === Node.ELEMENT_NODE ? node : node.parentElement;
    return el !== null && el.closest("[data-ui-skip]") === null;
  }

  /** The page as an A11ySnapshot: {root, captured_at, selection}. */
  snapshot() {
    this.elements = new Map();
    const budget = { left: MAX_NODES };
    const root = { ref: "root", role: "document", name: cut(document.title), children: this.describeChildren(this.root, budget) };
    const tree = { root, captured_at: Date.now() };
    const selection = this.selection();
    if (selection) tree.selection = selection;
    return tree;
  }

  describeChildren(el, budget) {
    let kids = [...el.children];
    if (el.tagName === "UL" || el.tagName === "OL") kids = kids.slice(-MAX_LIST_ITEMS);
    const out = [];
    for (const kid of kids) out.push(...this.describe(kid, budget));
    return out;
  }

  /** The nodes for `el`: one node, or its children's when it has no role of its own. */
  describe(el, budget) {
    if (budget.left <= 0 || hidden(el)) return [];
    const role = roleOf(el);
    if (!role) return this.describeChildren(el, budget);
    budget.left--;
    const ref = this.refOf(el);
    this.elements.set(ref, el);
    const node = { ref, role };
    const name = nameOf(el, role);
    if (name) node.name = name;
    if ("value" in el && ["textbox", "searchbox", "combobox", "slider", "meter"].includes(role) && el.type !== "password") {
      const value = cut(String(el.value));
      if (value) node.value = value;
    }
    if (el.dataset.view) node.view = el.dataset.view; // a view the agent can navigate to
    if (role === "heading") node.level = Number(el.tagName[1]) || Number(el.getAttribute("aria-level")) || undefined;
    const state = [];
    if (document.activeElement === el) state.push("focused");
    if (el.disabled || el.getAttribute("aria-disabled") === "true") state.push("disabled");
    if (el.checked) state.push("checked");
    if (el.getAttribute("aria-pressed") === "true") state.push("pressed");
    if (el.getAttribute("aria-expanded") === "true") state.push("expanded");
    if (state.length) node.state = state;
    if (!TEXT_ROLES.has(role)) {
      const children = this.describeChildren(el, budget);
      if (children.length) node.children = children;
    }
    return [node];
  }

  selection() {
    const active = document.activeElement;
    if (active && "selectionStart" in active && active.selectionStart !== active.selectionEnd && this.refs.has(active)) {
      const [start, end] = [active.selectionStart, active.selectionEnd];
      return { ref: this.refs.get(active), text: cut(active.value.slice(start, end), 200), start_offset: start, end_offset: end };
    }
    const sel = document.getSelection();
    if (!sel || sel.isCollapsed || !sel.rangeCount) return null;
    for (let node = sel.anchorNode; node; node = node.parentNode) {
      if (this.refs.has(node)) return { ref: this.refs.get(node), text: cut(sel.toString(), 200) };
    }
    return null;
  }

  schedule() {
    if (this.timer || this.client.state !== "connected") return;
    const wait = Math.max(0, this.lastAt + SNAPSHOT_THROTTLE_MS - Date.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      this.sendSnapshot();
    }, wait);
  }

  sendSnapshot() {
    if (this.client.state !== "connected") return;
    const tree = this.snapshot();
    const text = JSON.stringify({ ...tree, captured_at: 0 });
    if (text === this.lastSent) return; // nothing the agent can see has changed
    this.lastSent = text;
    this.lastAt = Date.now();
    this.client.send("ui-snapshot", { tree });
  }

  // -- ui-event --------------------------------------------------------------------------

  event(name, payload) {
    if (this.client.state === "connected") this.client.send("ui-event", { event: name, payload });
  }

  clicked(e) {
    const el = e.target.closest?.("button, a[href], [role=button], [role=link], input[type=checkbox], input[type=radio]");
    if (!el || !this.watched(el)) return;
    this.event("click", { ref: this.refOf(el), name: nameOf(el, roleOf(el) ?? "button") });
  }

  // -- ui-command ------------------------------------------------------------------------

  /** Handle a custom command: fn(payload). */
  register(command, fn) {
    this.handlers[command] = fn;
  }

  run(command, payload) {
    const handler = this.handlers[command];
    if (!handler) return console.warn(`ui-command ${command}: no handler`);
    try {
      handler(payload);
    } catch (err) {
      console.warn(`ui-command ${command} failed:`, err);
    }
  }

  /** The element a command means: by ref, else by element id. */
  target({ ref, target_id: targetId }) {
    const el = ref ? this.elements.get(ref) : null;
    if (el?.isConnected) return el;
    return targetId ? document.getElementById(targetId) : null;
  }

  toast({ title, subtitle, description, image_url: imageUrl, duration_ms: ms }) {
    if (!this.toasts) {
      this.toasts = document.createElement("div");
      this.toasts.className = "toasts";
      document.body.append(this.toasts);
    }
    const toast = document.createElement("div");
    toast.className = "toast";
    toast.setAttribute("role", "status");
    if (imageUrl) toast.append(Object.assign(document.createElement("img"), { src: imageUrl, alt: "" }));
    for (const [tag, text, cls] of [["strong", title], ["span", subtitle, "subtitle"], ["p", description]]) {
      if (text) toast.append(Object.assign(document.createElement(tag), { textContent: text, className: cls ?? "" }));
    }
    this.toasts.append(toast);
    setTimeout(() => toast.remove(), ms ?? TOAST_MS);
  }

  navigate({ view }) {
    const el = document.getElementById(view) ?? document.querySelector(`[data-view="${CSS.escape(view)}"]`);
    if (!el) return console.warn(`navigate: no view ${view}`);
    el.scrollIntoView({ block: "start" });
    history.replaceState(null, "", `#${encodeURIComponent(view)}`);
    document.querySelectorAll(".ui-current-view").forEach((v) => v.classList.remove("ui-current-view"));
    el.classList.add("ui-current-view");
  }

  highlight(payload) {
    const el = this.target(payload);
    if (!el) return;
    el.scrollIntoView({ block: "nearest" });
    el.classList.add("ui-highlight");
    clearTimeout(el.uiHighlightTimer);
    el.uiHighlightTimer = setTimeout(() => el.classList.remove("ui-highlight"), payload.duration_ms ?? HIGHLIGHT_MS);
  }

  click(payload) {
    const el = this.target(payload);
    // Disabled controls stay out of the agent's reach, as they are out of the user's.
    if (el && !el.disabled && el.getAttribute("aria-disabled") !== "true") el.click();
  }

  selectText(payload) {
    const el = this.target(payload);
    if (!el) return;
    const { start_offset: start, end_offset: end } = payload;
    if ("setSelectionRange" in el && typeof el.value === "string") {
      el.focus();
      el.setSelectionRange(start ?? 0, end ?? el.value.length);
      return;
    }
    const range = document.createRange();
    if (start == null && end == null) {
      range.selectNodeContents(el);
    } else {
      // Offsets count characters over the element's text nodes, in document order.
      const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      const total = el.textContent.length;
      const [from, to] = [start ?? 0, Math.min(end ?? total, total)];
      let seen = 0;
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const len = node.textContent.length;
        if (from >= seen && from <= seen + len) range.setStart(node, from - seen);
        if (to >= seen && to <= seen + len) {
          range.setEnd(node, to - seen);
          break;
        }
        seen += len;
      }
    }
    const sel = document.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }

  setInputValue(payload) {
    const el = this.target(payload);
    if (!el || el.disabled || el.readOnly) return;
    if (el.tagName === "SELECT") {
      const option = [...el.options].find((o) => o.value === payload.value || o.text === payload.value);
      if (option) el.value = option.value;
    } else {
      el.value = payload.value;
    }
    el.dispatchEvent(new Event("input", { bubbles: true }));
    el.dispatchEvent(new Event("change", { bubbles: true }));
  }

  // -- ui-job-group ----------------------------------------------------------------------

  cancelJobGroup(jobId, reason = "cancelled by the user") {
    return this.client.send("ui-cancel-job-group", { job_id: jobId, reason });
  }
}
