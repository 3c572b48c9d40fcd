"use strict";
// The live page of the admin router. Everything it shows comes from two routes of the
// same router, addressed relative to this page (so it works under any mount prefix):
// the snapshots (polled) and the events stream (server-sent events, reconnected when it
// drops). No library, no build step: this file is embedded in the crate as it is.
const SNAPSHOTS = "bulkheads";
const EVENTS = "events";
const POLL_MS = 1000;
const HISTORY_MS = 5 * 60 * 1000; // the limit's sparkline
const RATE_WINDOW_MS = 10 * 1000; // refusals per second, over the last 10 s of snapshots
const FEED_MAX = 50;
const REASONS = ["full", "timeout", "queue_timeout", "rate_limited", "shut_down", "key_limit"];
const DEFAULT_SATURATION = {
  active_warning: 0.8, active_critical: 0.95, queue_warning: 0.7, queue_critical: 0.9,
};

// A read token, when the router asks for one: taken from `#token=…` (a fragment never
// reaches a server or its logs) or typed into the form, and kept for this tab only.
let token = sessionStorage.getItem("bulkhead-read-token") || "";
const fromHash = location.hash.match(/(?:^#|&)token=([^&]*)/);
if (fromHash) {
  token = decodeURIComponent(fromHash[1]);
  sessionStorage.setItem("bulkhead-read-token", token);
  history.replaceState(null, "", location.pathname + location.search);
}
function authHeaders() {
  return token ? { Authorization: "Bearer " + token } : {};
}
document.getElementById("auth").addEventListener("submit", (e) => {
  e.preventDefault();
  token = document.getElementById("token").value;
  sessionStorage.setItem("bulkhead-read-token", token);
  document.getElementById("auth").hidden = true;
  poll();
  reconnectNow();
});

function el(tag, attrs, ...children) {
  const node = document.createElementNS(
    tag === "svg" || tag === "polyline" ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml",
    tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c);
  return node;
}
// A value the page shows, addressable as `data-v="<bulkhead>.<field>"`.
function value(name, field, cls) {
  return el("span", { "data-v": name + "." + field, class: cls || "num" }, "–");
}
function set(root, key, text) {
  const node = root.querySelector('[data-v="' + CSS.escape(key) + '"]');
  if (node && node.textContent !== String(text)) node.textContent = String(text);
  return node;
}
function ms(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const m = seconds * 1000;
  return (m < 10 ? m.toFixed(2) : m < 100 ? m.toFixed(1) : m.toFixed(0)) + " ms";
}
function levelOf(fraction, warning, critical) {
  return fraction >= critical ? "critical" : fraction >= warning ? "warning" : "ok";
}

// `?filter=pay` (or the box) shows the bulkheads whose name contains `pay`.
const filterBox = document.getElementById("filter");
filterBox.value = new URLSearchParams(location.search).get("filter") || "";
function shown(name) {
  return name.includes(filterBox.value.trim());
}
filterBox.addEventListener("input", () => {
  for (const [name, entry] of bulkheads) entry.article.hidden = !shown(name);
});

const bulkheads = new Map(); // name -> { article, samples: [{ t, limit, refused }] }
const main = document.getElementById("bulkheads");

function meter(name, label, field, capField) {
  return el("div", { class: "meter" },
    el("span", {}, label),
    el("div", { class: "bar" }, el("div", { "data-bar": name + "." + field })),
    el("span", { class: "num" }, value(name, field, "n"), " / ", value(name, capField, "n")));
}

function card(name) {
  const article = el("article", { "data-bulkhead": name, "data-saturation": "ok" },
    el("header", {},
      el("h2", {}, name),
      value(name, "kind", "kind"),
      value(name, "saturation", "level")),
    meter(name, "running / limit", "active", "limit"),
    el("div", { "data-pool": "" }, meter(name, "queue / capacity", "queued", "queue_capacity")),
    el("div", { class: "meter" }, el("span", {}, "waiting"), el("span", {}), value(name, "waiting")),
    el("div", { class: "meter" }, el("span", {}, "call p99"), el("span", { class: "note" }, "since start"),
      value(name, "call_p99")),
    el("div", { class: "meter" }, el("span", {}, "wait p99"), el("span", { class: "note" }, "since start"),
      value(name, "wait_p99")),
    el("div", { class: "meter", "data-pool": "" }, el("span", {}, "queue p99"),
      el("span", { class: "note" }, "since start"), value(name, "queue_p99")),
    el("h3", {}, "refusals"),
    el("table", { "data-refusals": name },
      el("thead", {}, el("tr", {}, el("th", {}, "reason"), el("th", { class: "num" }, "total"),
        el("th", { class: "num" }, "per second"))),
      el("tbody", {})),
    el("p", { class: "note" }, "permitted ", value(name, "permitted"), " · fallbacks ",
      value(name, "fallbacks")),
    el("h3", {}, "limit, last 5 minutes"),
    el("svg", { class: "spark", viewBox: "0 0 300 40", preserveAspectRatio: "none" },
      el("polyline", { "data-spark": name, points: "" })),
    el("p", { class: "note", "data-adaptive": "" }),
    el("div", { "data-partitions": "" }),
    el("div", { "data-keys": "" }));
  return article;
}

function refusalRows(name, entry, snapshot, now) {
  const tbody = entry.article.querySelector('[data-refusals] tbody');
  const refused = snapshot.calls.refused;
  const old = entry.samples.find((s) => now - s.t <= RATE_WINDOW_MS) || entry.samples[0];
  const seconds = (now - old.t) / 1000;
  const rows = REASONS.filter((r) => refused[r] > 0);
  tbody.replaceChildren(...(rows.length ? rows.map((r) => el("tr", {},
    el("td", {}, r),
    el("td", { class: "num" }, value(name, "refused." + r)),
    el("td", { class: "num" }, value(name, "refused_per_second." + r)))) :
    [el("tr", {}, el("td", { colspan: "3", class: "note" }, "none"))]));
  for (const r of rows) {
    set(tbody, name + ".refused." + r, refused[r]);
    const rate = seconds > 0 ? (refused[r] - (old.refused[r] || 0)) / seconds : 0;
    set(tbody, name + ".refused_per_second." + r, rate.toFixed(1));
  }
}

function spark(entry, snapshot) {
  const line = entry.article.querySelector("[data-spark]");
  const samples = entry.samples;
  const top = 1.25 * Math.max(1, snapshot.adaptive ? snapshot.adaptive.max_limit : 0,
    ...samples.map((s) => s.limit));
  const t0 = samples[samples.length - 1].t - HISTORY_MS;
  line.setAttribute("points", samples.map((s) =>
    ((s.t - t0) / HISTORY_MS * 300).toFixed(1) + "," + (38 - s.limit / top * 36).toFixed(1)).join(" "));
  const note = entry.article.querySelector("[data-adaptive]");
  note.textContent = snapshot.adaptive
    ? "adaptive (" + snapshot.adaptive.algorithm + "): " + snapshot.limit + " within " +
      snapshot.adaptive.min_limit + "–" + snapshot.adaptive.max_limit + ", " +
      snapshot.adaptive.limit_changes + " changes"
    : "static limit " + snapshot.limit;
}

function partitions(name, entry, snapshot) {
  const box = entry.article.querySelector("[data-partitions]");
  if (!snapshot.partitions.length) { box.replaceChildren(); return; }
  box.replaceChildren(el("h3", {}, "partitions"), el("table", {},
    el("thead", {}, el("tr", {}, ...["partition", "share", "guaranteed", "in flight", "admitted",
      "borrowed", "refused"].map((h, i) => el("th", i ? { class: "num" } : {}, h)))),
    el("tbody", {}, ...snapshot.partitions.map((p) => el("tr", {},
      el("td", {}, p.name),
      el("td", { class: "num" }, Math.round(p.share * 100) + " %"),
      ...["guaranteed", "in_flight", "admitted", "borrowed", "refused"].map((f) => {
        const cell = value(name, "partition." + p.name + "." + f);
        cell.textContent = String(p[f]);
        return el("td", { class: "num" }, cell);
      }))))));
}

function keys(name, entry, snapshot) {
  const box = entry.article.querySelector("[data-keys]");
  const k = snapshot.per_key;
  if (!k) { box.replaceChildren(); return; }
  const tracked = value(name, "keys_tracked");
  tracked.textContent = String(k.keys_tracked);
  const atLimit = value(name, "keys_at_limit");
  atLimit.textContent = String(k.keys_at_limit);
  box.replaceChildren(el("h3", {}, "keys"),
    el("p", { class: "note" }, tracked, " tracked of " + k.max_keys + " · ", atLimit,
      " at their cap of " + k.max_concurrent_calls + " · " + k.overflow_in_flight + " over max_keys"),
    ...(k.top_keys.length ? [el("p", { class: "note" }, "busiest: " + k.top_keys.slice(0, 5)
      .map((t) => "#" + t.key_id.toString(16) + " (" + t.in_flight + ")").join(", "))] : []));
}

function bar(entry, key, fraction, warning, critical) {
  const fill = entry.article.querySelector('[data-bar="' + CSS.escape(key) + '"]');
  if (!fill) return;
  fill.style.width = Math.min(100, fraction * 100).toFixed(1) + "%";
  fill.setAttribute("data-level", levelOf(fraction, warning, critical));
}

function render(views, now) {
  const seen = new Set();
  for (const view of views) {
    const name = view.name;
    const s = view.snapshot;
    seen.add(name);
    let entry = bulkheads.get(name);
    if (!entry) {
      entry = { article: card(name), samples: [] };
      bulkheads.set(name, entry);
      main.append(entry.article);
    }
    entry.article.hidden = !shown(name);
    entry.samples.push({ t: now, limit: s.limit, refused: Object.assign({}, s.calls.refused) });
    while (entry.samples.length > 1 && now - entry.samples[0].t > HISTORY_MS) entry.samples.shift();
    const a = entry.article;
    const levels = Object.assign({}, DEFAULT_SATURATION, view.config && view.config.saturation);
    a.setAttribute("data-saturation", s.saturation);
    set(a, name + ".kind", s.kind);
    set(a, name + ".saturation", s.saturation);
    set(a, name + ".active", s.active);
    set(a, name + ".limit", s.limit);
    set(a, name + ".waiting", s.waiting);
    set(a, name + ".permitted", s.calls.permitted);
    set(a, name + ".fallbacks", s.calls.fallbacks);
    bar(entry, name + ".active", s.limit ? s.active / s.limit : 0,
      levels.active_warning, levels.active_critical);
    const pool = s.queue_capacity !== null;
    for (const row of a.querySelectorAll("[data-pool]")) row.hidden = !pool;
    if (pool) {
      set(a, name + ".queued", s.queued);
      set(a, name + ".queue_capacity", s.queue_capacity);
      bar(entry, name + ".queued", s.queue_capacity ? s.queued / s.queue_capacity : 0,
        levels.queue_warning, levels.queue_critical);
      const q = set(a, name + ".queue_p99", ms(s.queue_time && s.queue_time.p99_seconds));
      q.setAttribute("data-seconds", String(s.queue_time && s.queue_time.p99_seconds));
    }
    const call = set(a, name + ".call_p99", ms(s.call_duration.p99_seconds));
    call.setAttribute("data-seconds", String(s.call_duration.p99_seconds));
    const wait = set(a, name + ".wait_p99", ms(s.wait_time.p99_seconds));
    wait.setAttribute("data-seconds", String(s.wait_time.p99_seconds));
    refusalRows(name, entry, s, now);
    spark(entry, s);
    partitions(name, entry, s);
    keys(name, entry, s);
  }
  for (const [name, entry] of bulkheads) {
    if (!seen.has(name)) { entry.article.remove(); bulkheads.delete(name); }
  }
}

function problem(text) {
  const p = document.getElementById("problem");
  p.hidden = !text;
  p.textContent = text || "";
}
function askForToken(status) {
  document.getElementById("auth").hidden = false;
  problem("the admin router answered " + status + ": it needs a read token (enter it above, " +
    "or open this page as …/ui#token=<token>)");
}

let polls = 0;
let polling = false;
async function poll() {
  if (polling) return;
  polling = true;
  try {
    const response = await fetch(SNAPSHOTS, { headers: authHeaders(), cache: "no-store" });
    if (response.status === 401 || response.status === 403) { askForToken(response.status); return; }
    if (!response.ok) { problem("snapshots: HTTP " + response.status); return; }
    const views = await response.json();
    const now = Date.now();
    render(views, now);
    polls += 1;
    document.body.setAttribute("data-polls", String(polls));
    document.getElementById("polled").textContent =
      "snapshot: " + new Date(now).toLocaleTimeString() + " (" + views.length + " bulkheads)";
    problem("");
  } catch (err) {
    problem("snapshots: " + err.message + " (retrying every second)");
  } finally {
    polling = false;
  }
}

// The events stream, read with fetch (an EventSource cannot send a token) and parsed as
// server-sent events; when it drops it is reopened after 1 s, then 2, 4… at most 15 s.
let retryMs = 1000;
let retryTimer = null;
let connections = 0;
let eventsThisSecond = 0;
function streamState(state, text) {
  const badge = document.getElementById("stream");
  badge.setAttribute("data-state", state);
  badge.textContent = "events: " + text;
}
function reconnectNow() {
  if (retryTimer !== null) { clearTimeout(retryTimer); retryTimer = null; connect(); }
}
function onEvent(type, data) {
  eventsThisSecond += 1;
  let event;
  try { event = JSON.parse(data); } catch (_) { return; }
  if (type === "dropped") {
    streamState("live", "live (" + event.dropped + " events dropped: this page read too slowly)");
    return;
  }
  if (event.event !== "refused" && event.event !== "timed_out") return;
  const feed = document.getElementById("feed");
  feed.prepend(el("li", {}, new Date().toLocaleTimeString() + "  " + event.bulkhead + "  " +
    event.reason));
  while (feed.children.length > FEED_MAX) feed.lastChild.remove();
}
async function connect() {
  retryTimer = null;
  streamState(connections ? "reconnecting" : "connecting", connections ? "reconnecting" : "connecting");
  try {
    const response = await fetch(EVENTS, { headers: Object.assign({ Accept: "text/event-stream" }, authHeaders()), cache: "no-store" });
    if (response.status === 401 || response.status === 403) askForToken(response.status);
    if (!response.ok || !response.body) throw new Error("HTTP " + response.status);
    connections += 1;
    retryMs = 1000;
    streamState("live", "live");
    document.body.setAttribute("data-connections", String(connections));
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value: chunk, done } = await reader.read();
      if (done) break;
      buffer += chunk;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let type = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) type = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) onEvent(type, data.join("\n"));
      }
      if (buffer.length > 1 << 20) break; // a stream that never ends its events
    }
    streamState("reconnecting", "stream ended, reconnecting in " + retryMs / 1000 + " s");
  } catch (err) {
    streamState("reconnecting", "down (" + err.message + "), retrying in " + retryMs / 1000 + " s");
  }
  retryTimer = setTimeout(connect, retryMs);
  retryMs = Math.min(retryMs * 2, 15000);
}

setInterval(() => {
  document.getElementById("rate").textContent = "events/s: " + eventsThisSecond;
  eventsThisSecond = 0;
}, 1000);
setInterval(poll, POLL_MS);
poll();
connect();
