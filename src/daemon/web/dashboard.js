// vramd dashboard: polls the JSON API of the daemon that serves it and draws
// with dygraphs. Every text from the API goes into the page as text
// (textContent), never as HTML: job names are chosen by users. dygraphs
// escapes series labels itself, so labels go to it unescaped.
"use strict";

const REFRESH_MS = 2000, HISTORY_S = 600, POINTS = 300, GIB = 1073741824;
const charts = {};  // dygraphs by element id
const hist = {};    // per GPU: the window of history kept here, extended by deltas
let lastOk = null;  // Date of the last complete refresh

function gib(b) { return b == null ? "–" : (b / GIB).toFixed(2) + " GiB"; }
function num(x, unit) { return x == null ? "–" : (Math.round(x * 10) / 10) + " " + unit; }
function ago(s) { s = Math.max(0, s); return s < 120 ? s.toFixed(0) + " s" : (s / 60).toFixed(0) + " min"; }
function clock(t) { return new Date(t * 1000).toLocaleTimeString(); }
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text != null) e.textContent = text;
  return e;
}
// vramd's token: TCP serves its data to token holders only. It comes in
// the address's fragment (http://127.0.0.1:7878/#token=TOKEN: a fragment
// never reaches a server or its logs) or from the form, is kept for this
// tab only (sessionStorage), and the fragment is taken off the address.
const TOKEN_KEY = "vramd-token";
function takeToken() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
}
takeToken();
window.addEventListener("hashchange", takeToken);  // a new address in an open tab

class Refused extends Error {}  // 401/403: the token is missing or wrong

async function get(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const r = await fetch(path, {cache: "no-store",
                               headers: token ? {Authorization: "Bearer " + token} : {}});
  if (r.status === 401 || r.status === 403) {
    let why = "HTTP " + r.status;
    try { why = (await r.json()).error.message; } catch (e) { /* not JSON: the status says it */ }
    throw new Refused(why);
  }
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function askToken(e) {
  const form = document.getElementById("login");
  form.hidden = false;
  document.body.classList.add("offline");  // figures shown before are not current
  document.getElementById("login-why").textContent = e.message;
  document.getElementById("updated").textContent = "needs vramd's token";
}
document.getElementById("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  document.getElementById("login").hidden = true;
});

function figure(parent, id, label, value, text) {
  const span = el("span", {}, label + " ");
  const b = el("b", {id: id, "data-value": value == null ? "" : String(value)}, text);
  span.appendChild(b);
  parent.appendChild(span);
}

function gpuCard(index) {
  let card = document.getElementById("gpu" + index);
  if (card) return card;
  card = el("div", {class: "gpu", id: "gpu" + index});
  card.appendChild(el("h3"));
  card.appendChild(el("div", {class: "figures"}));
  const bar = el("div", {class: "bar"});
  bar.appendChild(el("div", {class: "used"}));
  bar.appendChild(el("div", {class: "reserved"}));
  card.appendChild(bar);
  const c = el("div", {class: "charts"});
  for (const k of ["mem", "jobs", "util"]) {
    const box = el("div", {class: "chart-box"});
    box.appendChild(el("div", {class: "chart", id: "chart-" + k + index}));
    box.appendChild(el("div", {class: "legend", id: "legend-" + k + index}));
    c.appendChild(box);
  }
  card.appendChild(c);
  document.getElementById("gpus").appendChild(card);
  return card;
}

// status: /v1/status (admission figures); live: /v1/watch's device (sensors)
function drawGpu(d, live) {
  const card = gpuCard(d.index);
  const up = d.available && (!live || live.health !== "error");
  card.classList.toggle("down", !up);
  const name = d.name || (live && live.name) || "unknown model";
  const why = live && live.error ? " (" + live.error + ")" : "";
  card.querySelector("h3").textContent = "GPU " + d.index + " · " + name + (up ? "" : " · unavailable" + why);
  const f = card.querySelector(".figures");
  f.replaceChildren();
  const i = "gpu" + d.index + "-";
  figure(f, i + "total", "total", d.total_bytes, gib(d.total_bytes));
  figure(f, i + "used", "used", d.used_bytes, gib(d.used_bytes));
  figure(f, i + "reserved", "reserved by vramd", d.reserved_bytes, gib(d.reserved_bytes));
  figure(f, i + "free", "free for admission", d.free_for_admission_bytes, gib(d.free_for_admission_bytes));
  if (live) {
    figure(f, i + "util", "util", live.utilization_pct, num(live.utilization_pct, "%"));
    figure(f, i + "temp", "temp", live.temperature_c, num(live.temperature_c, "°C"));
    figure(f, i + "power", "power", live.power_w, num(live.power_w, "W"));
  }
  const bar = card.querySelector(".bar");
  const total = d.total_bytes || 0;
  const pct = (x) => (total && x ? (100 * x / total).toFixed(2) : "0") + "%";
  bar.querySelector(".used").style.width = pct(d.used_bytes);
  bar.querySelector(".reserved").style.width = pct(Math.max(0, (d.reserved_bytes || 0) - (d.used_bytes || 0)));
}

function row(body, cells, attrs) {
  const tr = el("tr", attrs || {});
  for (const [v, cls] of cells) tr.appendChild(el("td", cls ? {class: cls} : {}, String(v)));
  body.appendChild(tr);
}
function empty(body, cols, text) {
  body.appendChild(el("tr")).appendChild(el("td", {colspan: cols, class: "muted"}, text));
}

function drawJobs(watch) {
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren();
  const now = watch.t || Date.now() / 1000;
  for (const j of watch.jobs) {
    const since = j.state === "running" ? now - j.started_at : now - j.submitted_at;
    const where = j.state === "queued" ? "wants " + j.gpus : j.devices.join(",");
    row(body, [[j.id], [j.name, "name"], [j.user], [j.state], [where],
               [gib(j.reserved_bytes || null)], [gib(j.state === "running" ? j.used_bytes : null)], [ago(since)]],
        {id: "job" + j.id, class: "job " + j.state});
  }
  if (!watch.jobs.length) empty(body, 8, "no queued or running jobs");
}

function drawProcesses(watch) {
  const body = document.querySelector("#procs tbody");
  body.replaceChildren();
  const procs = watch.processes.slice().sort((a, b) => a.device - b.device || (b.used_bytes || 0) - (a.used_bytes || 0));
  for (const p of procs)
    row(body, [[p.device], [p.pid], [p.user], [p.name, "name"], [gib(p.used_bytes)], [p.job_id == null ? "–" : p.job_id]],
        {class: "proc", "data-pid": String(p.pid)});
  if (!procs.length) empty(body, 6, "no process holds GPU memory");
}

function drawAlerts(alerts) {
  const ul = document.getElementById("alerts");
  ul.replaceChildren();
  const n = alerts.firing.length;
  const count = document.getElementById("alert-count");
  count.textContent = String(n);
  count.className = "count" + (n ? " hot" : "");
  const item = (a, cls, when) => {
    const li = el("li", {class: cls, "data-rule": a.rule});
    li.appendChild(el("span", {class: "level " + a.level}, a.level));
    if (cls !== "alert") li.appendChild(el("span", {class: "state"}, " " + a.state));
    li.appendChild(document.createTextNode(" " + a.rule + " · " + a.message + " · " + when));
    ul.appendChild(li);
  };
  for (const a of alerts.firing) item(a, "alert", "since " + clock(a.fired_at));
  for (const a of alerts.pending) item(a, "pending", "since " + clock(a.pending_since));
  for (const a of alerts.resolved) item(a, "resolved", "resolved " + clock(a.resolved_at));
  if (!ul.children.length) ul.appendChild(el("li", {class: "muted"}, "none"));
}

// Labels go with every update: dygraphs requires as many labels as columns,
// and the set of jobs on a GPU changes while the page stays open.
function chart(id, data, labels, opts) {
  const div = document.getElementById(id);
  if (!data.length) {
    if (charts[id]) { charts[id].destroy(); delete charts[id]; }
    div.replaceChildren(el("p", {class: "muted"}, opts.empty));
    document.getElementById(id.replace("chart-", "legend-")).replaceChildren();
    return;
  }
  const o = Object.assign({}, opts, {file: data, labels: labels});
  delete o.empty;
  if (charts[id]) { charts[id].updateOptions(o); return; }
  div.replaceChildren();
  delete o.file;
  charts[id] = new Dygraph(div, data, Object.assign({
    legend: "always", labelsDiv: id.replace("chart-", "legend-"), labelsSeparateLines: false,
    axisLabelWidth: 50, titleHeight: 20, labelsKMB: false, includeZero: true}, o));
}

// The history of one GPU: the first request loads the window, later ones only
// what is new (the last bucket again, since it may have been partial). The
// buckets stay on one grid (from a multiple of step), so a bucket keeps its
// key from one request to the next.
async function loadHistory(index, interval, now) {
  const step = Math.max(interval, HISTORY_S / POINTS);
  let h = hist[index];
  // a first load, another sampling period, or a page back from a long sleep
  // (its gap is larger than the window): the whole window again
  if (!h || h.step !== step || (h.next != null && now - h.next > HISTORY_S))
    h = hist[index] = {step: step, points: [], jobs: new Map(), next: null};
  const key = (t) => Math.round(t / step);
  const from = h.next != null ? h.next : Math.floor((now - HISTORY_S) / step) * step;
  const r = await get("/v1/history?device=" + index + "&from=" + from + "&step=" + step);
  const cut = key(from), oldest = key(now - HISTORY_S);
  const keep = (p) => key(p[0]) < cut && key(p[0]) >= oldest;
  h.points = h.points.filter(keep).concat(r.points);
  for (const s of h.jobs.values()) s.points = s.points.filter(keep);
  for (const j of r.jobs) {
    let s = h.jobs.get(j.id);
    if (!s) h.jobs.set(j.id, s = {points: []});
    s.name = j.name;
    s.points = s.points.concat(j.points);
  }
  for (const [id, s] of h.jobs) if (!s.points.length) h.jobs.delete(id);
  if (h.points.length) h.next = h.points[h.points.length - 1][0];
  return h;
}

function drawHistory(index, h, dev, rules) {
  const t = (x) => new Date(x * 1000);
  const key = (x) => Math.round(x / h.step);
  const total = dev && dev.total_bytes ? dev.total_bytes / GIB : null;
  const memRule = rules.find(r => r.metric === "memory_used_ratio" && r.above != null);
  const memLabels = ["time", "used", "reserved", "capacity"];
  const dashed = {strokePattern: Dygraph.DASHED_LINE, strokeWidth: 1};
  const series = {capacity: Object.assign({color: "#555"}, dashed)};
  if (memRule && total) {
    memLabels.push("alert " + memRule.name);
    series["alert " + memRule.name] = Object.assign({color: "#c0392b"}, dashed);
  }
  chart("chart-mem" + index, h.points.map(p => {
    const r = [t(p[0]), p[1] == null ? null : p[1] / GIB, p[4] == null ? null : p[4] / GIB, total];
    if (memLabels.length > 4) r.push(total * memRule.above);
    return r;
  }), memLabels, {title: "memory (GiB)", series: series, empty: "no history yet"});

  const jobs = [...h.jobs.entries()].sort((a, b) => a[0] - b[0]);
  const at = new Map(h.points.map((p, i) => [key(p[0]), i]));
  const rows = h.points.map(p => [t(p[0])].concat(jobs.map(() => 0)));
  jobs.forEach(([, s], k) => s.points.forEach(p => {
    const i = at.get(key(p[0]));
    if (i != null && p[1] != null) rows[i][k + 1] = p[1] / GIB;
  }));
  chart("chart-jobs" + index, jobs.length ? rows : [],
        ["time"].concat(jobs.map(([id, s]) => "job " + id + " " + s.name)),
        {title: "memory by job (GiB, stacked)", stackedGraph: true, fillGraph: true,
         empty: "memory by job: no job on this GPU in the last " + HISTORY_S / 60 + " min"});

  chart("chart-util" + index, h.points.map(p => [t(p[0]), p[5], p[6]]),
        ["time", "utilization %", "temperature °C"],
        {title: "utilization % · temperature °C", series: {"temperature °C": {axis: "y2"}},
         axes: {y: {valueRange: [0, 100]}, y2: {independentTicks: true}}, empty: "no history yet"});
}

function offline(e) {
  document.body.classList.add("offline");
  const box = document.getElementById("offline");
  box.hidden = false;
  box.textContent = "vramd is not answering (" + e.message + ")" +
    (lastOk ? ": the figures below are from " + lastOk.toLocaleTimeString() + " and are not current" : "");
  document.getElementById("updated").textContent = "retrying every " + REFRESH_MS / 1000 + " s";
}

async function refresh() {
  try {
    const [status, watch, alerts, health] = await Promise.all(
      [get("/v1/status"), get("/v1/watch"), get("/v1/alerts?limit=5"), get("/v1/health")]);
    const live = new Map(watch.devices.map(d => [d.index, d]));
    const now = watch.t || Date.now() / 1000;
    const hs = await Promise.all(status.devices.map(d => loadHistory(d.index, watch.interval_s, now)));
    for (const d of status.devices) drawGpu(d, live.get(d.index));
    drawJobs(watch);
    drawProcesses(watch);
    drawAlerts(alerts);
    status.devices.forEach((d, k) => drawHistory(d.index, hs[k], d, alerts.rules));
    lastOk = new Date();
    document.body.classList.remove("offline");
    document.getElementById("offline").hidden = true;
    document.getElementById("host").textContent = "vramd " + health.version + " · " + health.tcp;
    document.getElementById("updated").textContent = "updated " + lastOk.toLocaleTimeString();
    document.body.setAttribute("data-ready", "1");
    document.body.setAttribute("data-refreshes", String(+(document.body.getAttribute("data-refreshes") || 0) + 1));
    document.getElementById("login").hidden = true;
  } catch (e) {
    if (e instanceof Refused) askToken(e); else offline(e);
  }
  setTimeout(refresh, REFRESH_MS);
}
refresh();
