// gridlink dashboard: renders the state the server pushes (server-sent
// events, /events) and sends the page's requests with the token header.
"use strict";

const token = document.querySelector('meta[name="gridlink-token"]').content;
const readOnly = document.querySelector('meta[name="gridlink-read-only"]').content === "true"; // a grid member who may only look
const $ = (sel) => document.querySelector(sel);
const svgNS = "http://www.w3.org/2000/svg";
let last = null;                 // the newest state
const selected = new Set();      // transfer IDs ticked
const colors = ["#2f6fb5", "#e0694f", "#2e8b57", "#b07d2e", "#7b4fb5", "#1aa3a3", "#c2417f", "#5d6d7e"];

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
  }
  for (const k of kids) e.append(k);
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
function rate(bps) { return bps > 0 ? bytes(bps) + "/s" : "–"; }
function dur(s) {
  if (s < 0) return "–";
  s = Math.round(s);
  return s >= 3600 ? Math.floor(s / 3600) + "h" + Math.floor(s % 3600 / 60) + "m" : s >= 60 ? Math.floor(s / 60) + "m" + (s % 60) + "s" : s + "s";
}
function rows(tbody, list, make) {
  const tb = $(tbody);
  tb.replaceChildren(...list.map(make));
}
function td(text, cls) { return el("td", cls ? { class: cls } : {}, String(text)); }

// views
document.querySelectorAll("nav .tab").forEach((b) => b.addEventListener("click", () => show(b.dataset.view)));
function show(view) {
  document.querySelectorAll("nav .tab").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
  document.querySelectorAll(".view").forEach((s) => { s.hidden = s.id !== "view-" + view; });
  if (last) render(last);
}

// the overlay map: hubs on a circle, their links, nodes around their hub
function renderOverlay(o) {
  const map = $("#map");
  map.replaceChildren();
  const n = o.hubs.length, cx = 400, cy = 280, r = n > 1 ? 180 : 0;
  const pos = new Map();
  o.hubs.forEach((h, i) => {
    const a = 2 * Math.PI * i / Math.max(n, 1) - Math.PI / 2;
    pos.set(h.name, { x: cx + r * Math.cos(a), y: cy + r * Math.sin(a), a });
  });
  for (const l of o.links) {
    const p = pos.get(l.a), q = pos.get(l.b);
    if (!p || !q) continue;
    const g = svg("g", { class: "link-group", "data-a": l.a, "data-b": l.b });
    g.append(svg("line", { class: "link " + l.state, x1: p.x, y1: p.y, x2: q.x, y2: q.y }));
    // the label a little off the middle, so that crossing links' labels part
    g.append(svg("text", { class: "rtt", x: p.x + (q.x - p.x) * 0.4, y: p.y + (q.y - p.y) * 0.4 - 3, "text-anchor": "middle" }, l.rtt_ms.toFixed(1) + " ms"));
    map.append(g);
  }
  const byHub = new Map();
  for (const nd of o.nodes) { if (!byHub.has(nd.hub)) byHub.set(nd.hub, []); byHub.get(nd.hub).push(nd); }
  for (const h of o.hubs) {
    const p = pos.get(h.name);
    const nodes = byHub.get(h.name) || [];
    // the nodes fan out away from the centre, their names outward
    const step = Math.min(0.55, 2 * Math.PI / Math.max(nodes.length, 1));
    nodes.forEach((nd, j) => {
      const a = p.a + (j - (nodes.length - 1) / 2) * step;
      const x = p.x + 70 * Math.cos(a), y = p.y + 70 * Math.sin(a);
      const left = Math.cos(a) < -0.2;
      const g = svg("g", { class: "node" + (nd.self ? " self" : ""), "data-node": nd.name, "data-hub": h.name });
      g.append(svg("line", { x1: p.x, y1: p.y, x2: x, y2: y }));
      g.append(svg("circle", { cx: x, cy: y, r: 6 }));
      g.append(svg("text", { x: left ? x - 9 : x + 9, y: y + 4, "text-anchor": left ? "end" : "start" }, nd.name + (nd.self ? " (you)" : "")));
      map.append(g);
    });
    const g = svg("g", { class: "hub" + (h.reachable ? "" : " unreached"), "data-hub": h.name });
    g.append(svg("circle", { cx: p.x, cy: p.y, r: 16 }));
    g.append(svg("text", { x: p.x, y: p.y - 22, "text-anchor": "middle" }, h.name));
    g.append(svg("title", {}, `${h.name}: ${h.reachable ? "reachable" : "unreachable"}, ${h.nodes} nodes`));
    map.append(g);
  }
  $("#overlay-summary").textContent = `${o.hubs.length} hubs, ${o.links.length} links, ${o.nodes.length} nodes`;
  $("#overlay-errors").textContent = (o.errors || []).join("\n");
  rows("#links tbody", o.links, (l) => el("tr", { "data-a": l.a, "data-b": l.b }, td(l.a), td(l.b), td(l.rtt_ms.toFixed(1) + " ms", "num"), td(l.state), td(l.circuits, "num"), td(bytes(l.queued_bytes), "num")));
  rows("#hubs tbody", o.hubs, (h) => el("tr", { "data-hub": h.name }, td(h.name), td(h.reachable ? "yes" : "no"), td(h.hops, "num"), td(h.latency_ms.toFixed(1) + " ms", "num"), td(h.nodes, "num"), td(h.reported ? "yes" : "from routes")));
}

// connections: bytes and a throughput graph of the rates the server
// computes (dashboard/rates.go: measured intervals, resets, no spikes)
function connKey(c) { return c.local + " → " + c.remote; }
function rateOf(st, k) {
  const r = (st.throughput || []).find((x) => x.key === k);
  return r ? r.bytes_per_s : 0;
}
function renderConns(st) {
  $("#agent-error").textContent = st.agent_error || "";
  const conns = (st.agent && st.agent.conns) || [];
  $("#node-name").textContent = st.agent ? `of ${st.agent.node.name}` : "";
  // the node's proxy or certificate and revocation lists: their ends
  $("#node-creds").replaceChildren(...((st.agent && st.agent.credentials) || []).map((c) => el("span", { class: c.state, "data-kind": c.kind },
    `${c.kind} ${c.state}, ${c.kind === "revocation list" ? "next update" : "until"} ${new Date(c.not_after).toLocaleString()}${c.error ? " (" + c.error + ")" : ""}. `)));
  rows("#conns tbody", conns, (c) => el("tr", { "data-remote": c.remote }, td(c.local), td(c.remote), td(c.method), td(bytes(c.sent_bytes), "num"), td(bytes(c.received_bytes), "num"), td(rate(rateOf(st, connKey(c))), "num")));
  const cv = $("#graph"), g = cv.getContext("2d");
  g.clearRect(0, 0, cv.width, cv.height);
  const shown = (st.throughput || []).slice(0, colors.length), keys = shown.map((r) => r.key);
  let peak = 1;
  const series = shown.map((r) => {
    const pts = (r.points || []).map((p) => ({ t: Date.parse(p.time) / 1000, r: p.bytes_per_s }));
    for (const p of pts) peak = Math.max(peak, p.r);
    return pts;
  });
  const now = Date.parse(st.time) / 1000, span = 60, W = cv.width, H = cv.height - 20;
  g.fillStyle = "#667"; g.font = "11px sans-serif";
  g.fillText(rate(peak), 4, 12); g.fillText("60 s", 4, cv.height - 4);
  series.forEach((pts, i) => {
    g.strokeStyle = colors[i]; g.lineWidth = 2; g.beginPath();
    pts.forEach((p, j) => {
      const x = W - (now - p.t) / span * W, y = H - p.r / peak * (H - 16) + 4;
      j ? g.lineTo(x, y) : g.moveTo(x, y);
    });
    g.stroke();
  });
  $("#legend").replaceChildren(...keys.map((k, i) => { const s = el("span", {}, k); const sw = el("i"); sw.style.background = colors[i]; s.prepend(sw); return s; }));
}

// the virtual network's peers and paths
function renderVIP(st) {
  const v = st.agent && st.agent.vip;
  $("#vip-summary").textContent = v ? `${v.device}: ${v.addrs.join(", ")}, MTU ${v.mtu_bytes}` + (v.claim ? ` (${v.claim})` : "") : "this node runs no virtual network (gridlink node --vip)";
  const peers = (v && v.peers) || [];
  rows("#vip-peers tbody", peers, (p) => el("tr", { "data-peer": p.name || p.id }, td(p.name || p.id), td(p.addrs.join(" ")), td(p.path || "–"), td((p.paths || []).join(", ")), td(p.connected ? "yes" : "no"),
    td(bytes(p.sent_bytes), "num"), td(bytes(p.recv_bytes), "num"), td(p.path_switches, "num"),
    td(p.queue_full_packets + p.conn_lost_packets + p.spoofed_packets + p.denied_packets, "num")));
  const drops = v ? Object.entries(v.drops).filter(([, n]) => n > 0) : [];
  rows("#vip-drops tbody", drops.length ? drops : [["none", ""]], ([k, n]) => el("tr", {}, td(k.replace(/_packets$/, "").replaceAll("_", " ")), td(n, "num")));
}

// transfers
function renderTransfers(st) {
  const ts = st.transfers || [];
  for (const id of [...selected]) if (!ts.some((t) => t.id === id)) selected.delete(id);
  rows("#transfers tbody", ts, (t) => {
    const box = el("input", { type: "checkbox", checked: selected.has(t.id) });
    box.addEventListener("change", () => box.checked ? selected.add(t.id) : selected.delete(t.id));
    const bar = el("progress", { max: Math.max(t.total_bytes, 1), value: t.bytes });
    const live = t.state === "running" || t.state === "paused" || t.state === "starting";
    const acts = el("td", { class: "actions" });
    if (live && t.pausable && !readOnly) {
      const b = el("button", { class: t.state === "paused" ? "resume" : "pause" }, t.state === "paused" ? "Resume" : "Pause");
      b.addEventListener("click", () => act(t.state === "paused" ? "resume" : "pause", [t.id]));
      acts.append(b, " ");
    }
    if (live && !readOnly) {
      const c = el("button", { class: "cancel" }, "Cancel");
      c.addEventListener("click", () => act("cancel", [t.id]));
      acts.append(c);
    }
    const tr = el("tr", { class: "state-" + t.state, "data-id": t.id, "data-state": t.state, "data-bytes": t.bytes, "data-total": t.total_bytes },
      el("td", {}, box), td(t.id), td(t.kind), td(t.srcs.join(" ")), td(t.dst), td(t.state, "state"),
      el("td", { class: "progress" }, bar, ` ${bytes(t.bytes)} of ${bytes(t.total_bytes)}, ${t.files}/${t.total_files} files`),
      td(rate(t.rate_bytes_per_s), "num"), td(t.state === "done" ? "done" : dur(t.eta_s), "num"), td(new Date(t.started).toLocaleTimeString()), acts);
    if (t.error) tr.append(td(t.error, "error"));
    return tr;
  });
}

async function post(path, body) {
  const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json", "X-Gridlink-Token": token }, body: JSON.stringify(body) });
  const text = await r.text();
  let v; try { v = JSON.parse(text); } catch { v = { error: text.trim() }; }
  if (!r.ok) throw new Error(v.error || r.statusText);
  return v;
}
async function act(action, ids) {
  try {
    const r = await post("/api/transfers/action", { action, ids });
    const bad = Object.entries(r.results).filter(([, why]) => why);
    $("#action-result").textContent = bad.map(([id, why]) => `#${id}: ${why}`).join("; ");
  } catch (e) { $("#action-result").textContent = e.message; }
}
for (const a of ["pause", "resume", "cancel"]) $("#" + a + "-selected").addEventListener("click", () => act(a, [...selected]));
$("#start").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const limit = parseInt($("#limit").value || "0", 10);
  try {
    const r = await post("/api/transfers", { srcs: $("#srcs").value.trim().split(/\s+/), dst: $("#dst").value.trim(), recursive: $("#recursive").checked, limit_bytes_per_s: isNaN(limit) ? 0 : limit });
    $("#start-result").textContent = "started #" + r.id;
    $("#start-result").dataset.id = r.id;
  } catch (e) { $("#start-result").textContent = e.message; }
});

function render(st) {
  renderOverlay(st.overlay);
  renderConns(st);
  renderVIP(st);
  renderTransfers(st);
}
function connect() {
  const es = new EventSource("/events");
  es.addEventListener("state", (ev) => {
    last = JSON.parse(ev.data);
    render(last);
    $("#live").className = "live on";
    $("#live").textContent = "live " + new Date(last.time).toLocaleTimeString();
  });
  es.addEventListener("refused", (ev) => { // a member no longer admitted (revoked, expired)
    es.close();
    $("#live").className = "live off";
    $("#live").textContent = ev.data;
  });
  es.onerror = () => { $("#live").className = "live off"; $("#live").textContent = "reconnecting…"; };
}
connect();
