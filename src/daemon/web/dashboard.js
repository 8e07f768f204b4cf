// vramd dashboard: polls the JSON API of the daemon that serves it and draws
// with dygraphs. Every text from the API goes through textContent (job names
// are chosen by users).
"use strict";

const REFRESH_MS = 2000, HISTORY_S = 600;
const charts = {};  // per GPU: {mem, jobs, util}
let jobNames = {};

// dygraphs writes series labels into its legend as HTML: job names go in escaped
function esc(s) { return String(s).replace(/[&<>"']/g, c => "&#" + c.charCodeAt(0) + ";"); }
function gib(b) { return b == null ? "–" : (b / 1073741824).toFixed(2) + " GiB"; }
function ago(s) { s = Math.max(0, s); return s < 120 ? s.toFixed(0) + " s" : (s / 60).toFixed(0) + " min"; }
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text != null) e.textContent = text;
  return e;
}
async function get(path) {
  const r = await fetch(path, {cache: "no-store"});
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function figure(parent, id, label, bytes) {
  const span = el("span", {}, label + " ");
  const b = el("b", {id: id, "data-bytes": String(bytes)}, gib(bytes));
  span.appendChild(b);
  parent.appendChild(span);
}

function gpuCard(d) {
  let card = document.getElementById("gpu" + d.index);
  if (!card) {
    card = el("div", {class: "gpu", id: "gpu" + d.index});
    card.appendChild(el("h3"));
    card.appendChild(el("div", {class: "figures"}));
    const bar = el("div", {class: "bar"});
    bar.appendChild(el("div", {class: "used"}));
    bar.appendChild(el("div", {class: "reserved"}));
    card.appendChild(bar);
    const c = el("div", {class: "charts"});
    for (const k of ["mem", "jobs", "util"]) c.appendChild(el("div", {class: "chart", id: "chart-" + k + d.index}));
    card.appendChild(c);
    document.getElementById("gpus").appendChild(card);
  }
  return card;
}

function drawStatus(status) {
  for (const d of status.devices) {
    const card = gpuCard(d);
    card.querySelector("h3").textContent = "GPU " + d.index + " · " + d.name +
      (d.available ? "" : " · unavailable");
    const f = card.querySelector(".figures");
    f.replaceChildren();
    figure(f, "gpu" + d.index + "-total", "total", d.total_bytes);
    figure(f, "gpu" + d.index + "-used", "used", d.used_bytes);
    figure(f, "gpu" + d.index + "-reserved", "reserved by vramd", d.reserved_bytes);
    figure(f, "gpu" + d.index + "-free", "free for admission", d.free_for_admission_bytes);
    const bar = card.querySelector(".bar");
    const pct = (x) => (100 * x / Math.max(1, d.total_bytes)).toFixed(2) + "%";
    bar.querySelector(".used").style.width = pct(d.used_bytes);
    bar.querySelector(".reserved").style.width = pct(Math.max(0, d.reserved_bytes - d.used_bytes));
  }
}

function drawJobs(watch) {
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren();
  const now = Date.now() / 1000;
  jobNames = {};
  for (const j of watch.jobs) {
    jobNames[j.id] = j.name;
    const tr = el("tr", {id: "job" + j.id, class: "job " + j.state});
    const since = j.state === "running" ? now - j.started_at : now - j.submitted_at;
    for (const v of [j.id, j.name, j.user, j.state, j.devices.join(",") || "–",
                     gib(j.reserved_bytes || null), gib(j.state === "running" ? j.used_bytes : null), ago(since)])
      tr.appendChild(el("td", {}, String(v)));
    body.appendChild(tr);
  }
  if (!watch.jobs.length) body.appendChild(el("tr", {}, "")).appendChild(el("td", {colspan: 8, class: "muted"}, "no queued or running jobs"));
}

function drawAlerts(alerts) {
  const ul = document.getElementById("alerts");
  ul.replaceChildren();
  const n = alerts.firing.length;
  const count = document.getElementById("alert-count");
  count.textContent = String(n);
  count.className = "count" + (n ? " hot" : "");
  for (const a of alerts.firing) {
    const li = el("li", {class: "alert", "data-rule": a.rule});
    li.appendChild(el("span", {class: "level " + a.level}, a.level));
    li.appendChild(document.createTextNode(" " + a.rule + " · " + a.message + " · since " +
      new Date(a.fired_at * 1000).toLocaleTimeString()));
    ul.appendChild(li);
  }
  if (!n) ul.appendChild(el("li", {class: "muted"}, "none"));
}

function chart(id, data, labels, opts) {
  if (!data.length) return;
  if (charts[id]) { charts[id].updateOptions(Object.assign({file: data}, opts)); return; }
  charts[id] = new Dygraph(document.getElementById(id), data,
    Object.assign({labels: labels, legend: "always", labelsKMB: false, axisLabelWidth: 60}, opts));
}

async function drawHistory(index) {
  const h = await get("/v1/history?device=" + index + "&from=-" + HISTORY_S);
  const t = (x) => new Date(x * 1000);
  const G = 1073741824;
  chart("chart-mem" + index, h.points.map(p => [t(p[0]), p[1] / G, p[4] / G]),
        ["time", "used GiB", "reserved GiB"], {title: "memory", ylabel: "GiB", includeZero: true});
  // per-job stacked: one column per job, aligned on the device's timestamps
  const times = h.points.map(p => p[0]);
  if (h.jobs.length && times.length) {
    const rows = times.map(x => [t(x)].concat(h.jobs.map(() => 0)));
    const at = new Map(times.map((x, i) => [x, i]));
    h.jobs.forEach((j, k) => j.points.forEach(p => { const i = at.get(p[0]); if (i != null) rows[i][k + 1] = p[1] / G; }));
    chart("chart-jobs" + index, rows,
          ["time"].concat(h.jobs.map(j => esc("job " + j.id + " " + (j.name || jobNames[j.id] || "")))),
          {title: "memory by job (stacked)", stackedGraph: true, fillGraph: true, ylabel: "GiB", includeZero: true});
  } else {
    const e = document.getElementById("chart-jobs" + index);
    if (charts["chart-jobs" + index]) { charts["chart-jobs" + index].destroy(); delete charts["chart-jobs" + index]; }
    e.replaceChildren(el("p", {class: "muted"}, "memory by job: no running job on this GPU"));
  }
  chart("chart-util" + index, h.points.map(p => [t(p[0]), p[5], p[6]]),
        ["time", "utilization %", "temperature C"], {title: "utilization and temperature"});
}

async function refresh() {
  try {
    const [status, watch, alerts, health] = await Promise.all(
      [get("/v1/status"), get("/v1/watch"), get("/v1/alerts?limit=0"), get("/v1/health")]);
    drawStatus(status);
    drawJobs(watch);
    drawAlerts(alerts);
    await Promise.all(status.devices.map(d => drawHistory(d.index)));
    document.getElementById("host").textContent = "vramd " + health.version + " · " + health.tcp;
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.setAttribute("data-ready", "1");
  } catch (e) {
    document.getElementById("updated").textContent = "error: " + e.message;
  }
  setTimeout(refresh, REFRESH_MS);
}
refresh();
