// cliffsweep dashboard: polls /api/snapshot (ETag: an unchanged store costs the server a 304) and
// draws the sweep, the frontiers per model and, on a click, one trial. Plotly is served locally.
"use strict";
const REFRESH_MS = 3000;
const FIRST_MS = 100;  // while the server's snapshot is partial (starting, or the grid before the frontiers)
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];
let snap = null, etag = null, openTrialId = null;
// Plotly (4.6 MB; about a second of the browser's CPU to run) is loaded once the first snapshot
// is on the page, so the counts, the grid and the regimes do not wait for it (issue 41 part 4).
let plotlyReady = null;
const drawn = new WeakMap();  // plot element (a removed model's goes with it) -> the inputs it was drawn from: an unchanged model is not redrawn
let drawQueue = [];
const filters = {model: "", method: "", epochs: ""};

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const num = (x, d = 3) => (x === null || x === undefined) ? "-" : (+x).toFixed(d);
const lr = (x) => (x === null || x === undefined) ? "-" : (+x).toExponential(1).replace("e-", "e-").replace(".0e", "e");
const dur = (s) => (s === null || s === undefined) ? "?" : s < 120 ? `${Math.round(s)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`;
const $ = (id) => document.getElementById(id);

async function poll() {
  try {
    const r = await fetch("/api/snapshot", {headers: etag ? {"If-None-Match": etag} : {}});
    if (r.status === 200) { etag = r.headers.get("ETag"); snap = await r.json(); render(); if (!snap.partial) loadPlotly(); }
    else if (r.status !== 304) { $("subtitle").textContent = `the server answered ${r.status}`; }
  } catch (e) { $("subtitle").textContent = `the dashboard server is not answering (${e}); retrying`; }
  setTimeout(poll, snap && !snap.partial ? REFRESH_MS : FIRST_MS);
}

// performance marks (DevTools' timeline; bench/bench_dashboard.py reads them): the first
// snapshot with the grid drawn, the first with the regimes, every plot drawn
function mark(name) { if (!performance.getEntriesByName(name).length) performance.mark(name); }

function render() {
  const names = snap.stores.map((s) => s.name).filter(Boolean);
  $("title").textContent = `cliffsweep: ${[...new Set(names)].join(", ") || "dashboard"}`;
  const live = snap.sweep ? snap.sweep.live : null;
  $("subtitle").textContent = snap.stores.map((s) => `${s.uri} (${s.state})`).join("; ") +
    (live ? ` | driver: ${live.said}` : "") + ` | refreshed ${new Date(snap.generated_at * 1000).toLocaleTimeString()}`;
  renderNotices();
  if (snap.sweep) renderSweep(snap.sweep);
  renderFilters();
  renderModels();
  if (snap.sweep) mark("cliffsweep:grid");
  if ((snap.models || []).length) mark("cliffsweep:regimes");
}

function renderNotices() {
  const out = [];
  if (snap.said) out.push(snap.said);
  if (snap.problem) out.push(`the last read of the store failed (tried again): ${snap.problem}`);
  for (const s of snap.stores) {
    if (s.state === "missing") out.push(`no cliffsweep store at ${s.uri} (yet)`);
    if (s.state === "empty") out.push(`the store ${s.uri} has no trials yet`);
  }
  for (const m of snap.missing || []) out.push(`not in this store: ${m}`);
  $("notices").innerHTML = out.map((t) => `<div class="warn">${esc(t)}</div>`).join("");
}

function renderSweep(sw) {
  $("counts").innerHTML = `<span id="total-trials">trials ${sw.total}</span>` + sw.statuses.filter((s) => sw.counts[s])
    .map((s) => `<span class="st-${s}" id="count-${s}">${s} ${sw.counts[s]}</span>`).join("");
  const c = sw.cost, ev = sw.evals, live = sw.live || {};
  const pool = Object.entries(live.evaluators || {}).map(([m, n]) => `${m} ${n}`).join(", ") || "none running";
  const planned = c.planned_hours === null || c.planned_hours === undefined ? `plan: ${c.planned_said}` : `plan: ${num(c.planned_hours, 2)} ${c.planned_said}`;
  $("sweep-facts").innerHTML = [
    ev.reading ? "evaluated checkpoints: the evaluations are being read" :
    `evaluated checkpoints ${ev.checkpoints_done} (+${ev.base_done} base), queued ${ev.queued ?? "?"}, failed ${ev.errors}` +
      (ev.items_scored < ev.items ? `; items scored ${ev.items_scored} of ${ev.items} (${Math.round(100 * ev.items_scored / ev.items)} %: eval.adaptive)` : ""),
    `evaluators: ${esc(pool)}` + (live.extra_evaluators_started ? ` (${live.extra_evaluators_started} started for backlogs, ${live.evaluators_stopped} stopped when idle)` : ""),
    `jobs running ${live.running_jobs ?? "?"}, queued ${live.queued_jobs ?? "?"}`,
    ...(sw.drivers || []).map((d) => `driver ${esc(d.label)}: holds ${d.trials} trial(s)` +
      (d.other.length ? ` and ${esc(d.other.join(", "))}` : "")),
    ...Object.entries(sw.waits || {}).map(([why, n]) => `${n} pending wait for ${esc(why)}`),
    `elapsed ${dur(sw.elapsed_s)}, ETA ${dur(sw.eta_s)}`,
    `${esc(c.unit)}-hours used: training ${num(c.train_hours, 3)}, evaluation ${num(c.eval_hours, 3)}; ${esc(planned)}`,
  ].map((t) => `<div>${t}</div>`).join("");
  renderGrid(sw.grid);
  $("errors").innerHTML = sw.errors.length ? `<div>${sw.n_errors} recorded; the latest:</div><table><tr><th>at</th><th>kind</th><th>trial</th><th>step</th><th>message</th></tr>` +
    sw.errors.map((e) => `<tr><td>${esc((e.at || "").slice(0, 19))}</td><td>${esc(e.kind)}</td><td>${esc(e.trial_id)}</td><td>${esc(e.step)}</td><td><pre>${esc((e.message || "").slice(0, 600))}</pre></td></tr>`).join("") + "</table>" : "none";
}

function keep(row) {
  return (!filters.model || row.model === filters.model) && (!filters.method || row.method === filters.method) &&
    (!filters.epochs || String(row.epochs) === filters.epochs);
}

function renderGrid(grid) {
  const rows = grid.filter(keep);
  const lrs = [...new Set(rows.map((r) => r.lr))].sort((a, b) => a - b);
  const byRow = new Map();
  for (const r of rows) {
    const key = `${r.model} | ${r.series} | ${r.max_steps ? r.max_steps + " steps" : r.epochs + " ep"}`;
    if (!byRow.has(key)) byRow.set(key, new Map());
    byRow.get(key).set(r.lr, [...(byRow.get(key).get(r.lr) || []), r]);
  }
  let html = `<table><tr><th>model | series | length</th>${lrs.map((x) => `<th>${lr(x)}</th>`).join("")}</tr>`;
  for (const [key, cells] of byRow) {
    html += `<tr><td>${esc(key)}</td>` + lrs.map((x) => {
      const ts = cells.get(x) || [];
      if (!ts.length) return "<td></td>";
      const t = ts[ts.length - 1];
      const tip = ts.map((u) => u.folded ? `${u.folded.n} trials: ` + Object.entries(u.folded.by_status).map(([s, n]) => `${s} ${n}`).join(", ") +
        ` (the grid is folded above ${snap.sweep.grid_trials_max} trials); ${u.trial_id}: ${u.status}` : `${u.trial_id}: ${u.status}` + (u.steps ? ` (step ${u.steps}/${u.total_steps ?? "?"})` : "") +
        (u.attempt > 1 ? `, attempt ${u.attempt}` : "") + (u.waiting ? `; waits for ${u.waiting}` : "") + (u.error ? `; ${u.error.slice(0, 200)}` : "")).join("\n");
      return `<td class="cell st-${esc(t.status)}" title="${esc(tip)}" data-trial="${esc(t.trial_id)}"></td>`;
    }).join("") + "</tr>";
  }
  $("grid").innerHTML = html + "</table>";
  for (const td of $("grid").querySelectorAll("td.cell")) td.onclick = () => openTrial(td.dataset.trial);
}

function renderFilters() {
  const grid = snap.sweep ? snap.sweep.grid : [];
  const opts = (key) => [...new Set(grid.map((r) => String(r[key])))].sort();
  const sel = (key, label) => `<label>${label} <select data-key="${key}"><option value="">all</option>` +
    opts(key).map((v) => `<option ${filters[key] === v ? "selected" : ""}>${esc(v)}</option>`).join("") + "</select></label>";
  const html = sel("model", "model") + sel("method", "method") + sel("epochs", "epochs");
  if ($("filters").dataset.html !== html) {
    $("filters").innerHTML = html; $("filters").dataset.html = html;
    for (const s of $("filters").querySelectorAll("select")) s.onchange = () => { filters[s.dataset.key] = s.value; render(); };
  }
}

function seriesName(p) { return `${p.series} ${p.epochs}ep`; }

function renderModels() {
  $("frontier-said").textContent = snap.said || (snap.learn_task ? `learning: ${snap.learn_task}; retention: ${snap.retain_task}; confidence: ${snap.confidence}` : "");
  const holder = $("models");
  const shown = (snap.models || []).filter((m) => !filters.model || m.model === filters.model), queued = [];
  for (const div of [...holder.children]) if (!shown.some((m) => `model-${m.model}` === div.id)) div.remove();
  for (const m of shown) {
    let div = document.getElementById(`model-${m.model}`);
    if (!div) {
      div = document.createElement("div"); div.id = `model-${m.model}`;
      div.innerHTML = `<h3>${esc(m.model)}</h3><div class="series"></div><div class="plots"><div class="plot frontier-plot"></div><div class="plot lr-plot"></div></div>`;
      holder.appendChild(div);
    }
    renderSeries(div.querySelector(".series"), m);
    queued.push([div.querySelector(".frontier-plot"), m, drawFrontier], [div.querySelector(".lr-plot"), m, drawLr]);
  }
  drawQueue = queued;
  document.body.dataset.drawn = "0";
  if (window.Plotly) nextFrame(drawNext);
}

// after the browser has painted what is on the page (a task queued at once would run before it)
const nextFrame = (fn) => requestAnimationFrame(() => setTimeout(fn));

function loadPlotly() {
  if (plotlyReady) return plotlyReady;
  plotlyReady = new Promise((resolve) => {
    const script = document.createElement("script");
    script.src = "/static/plotly.min.js";
    script.onload = () => { resolve(); nextFrame(drawNext); };
    // after the first snapshot has been painted
    nextFrame(() => document.body.appendChild(script));
  });
  return plotlyReady;
}

function drawNext() {
  // one plot per task: the page stays responsive while a paper-sized sweep's plots are drawn
  if (!window.Plotly) return;
  const next = drawQueue.shift();
  if (!next) { document.body.dataset.drawn = "1"; mark("cliffsweep:drawn"); return; }
  const [el, m, draw] = next;
  const inputs = JSON.stringify([m, filters, snap.learn_task, snap.retain_task]);
  if (drawn.get(el) !== inputs) { draw(el, m); drawn.set(el, inputs); }
  nextFrame(drawNext);
}

function renderSeries(el, m) {
  const rows = m.series.filter(keep);
  el.innerHTML = `<table><tr><th>series</th><th>regime</th><th>confidence</th><th>critical lr</th><th>highest safe lr</th><th>lrs</th><th>why</th></tr>` +
    rows.map((s) => `<tr class="series-row" data-model="${esc(m.model)}" data-label="${esc(s.label)}"><td>${esc(s.label)}</td>` +
      `<td class="regime regime-${esc(s.regime)}">${esc(s.regime)}${s.is_cliff && s.runs_at_bracket === 1 ? " (one run)" : ""}${s.regime_paper && s.regime_paper !== s.regime ? ` (paper: ${esc(s.regime_paper)})` : ""}</td>` +
      `<td>${s.confidence === null ? (snap.confidence === "computing" ? "computing" : "-") : Math.round(100 * s.confidence) + "%"}</td>` +
      `<td>${s.is_cliff ? `${lr(s.critical_lr_low)} -> ${lr(s.critical_lr_high)}` : "-"}</td>` +
      `<td>${lr(s.max_safe_lr)}${s.within_noise ? `<div class="muted within-noise">${esc(s.within_noise)}</div>` : ""}</td>` +
      `<td>${s.n_lrs ?? "-"}</td><td class="muted">${esc(s.reason || "")}</td></tr>`).join("") + "</table>";
}

function colorOf(m) {
  const names = [...new Set(m.points.filter((p) => !p.is_base).map(seriesName))].sort();
  return (name) => PALETTE[names.indexOf(name) % PALETTE.length];
}

function hover(p) {
  const tasks = Object.entries(p.R_tasks || {}).map(([t, v]) => `<br>${t}: ${num(v)}`).join("");
  return `${p.trial_id}<br>lr ${lr(p.lr)}, ${p.epochs} epoch(s), step ${p.step}${p.final ? " (final)" : ""}<br>learning ${num(p.L)}, retention ${num(p.R)}${tasks}<extra></extra>`;
}

function drawFrontier(el, m) {
  const color = colorOf(m), pts = m.points.filter((p) => p.is_base || keep({...p, model: m.model}));
  const traces = [];
  for (const [name, group] of groupBy(pts.filter((p) => !p.is_base), seriesName)) {
    for (const final of [false, true]) {
      const g = group.filter((p) => !!p.final === final);
      if (!g.length) continue;
      traces.push({type: "scatter", mode: final ? "lines+markers" : "markers", name: final ? name : `${name} (intermediate)`,
        showlegend: final, legendgroup: name, x: g.map((p) => p.L), y: g.map((p) => p.R), customdata: g.map((p) => p.trial_id),
        marker: {color: color(name), size: final ? 9 : 6, opacity: final ? 1 : 0.25}, line: {color: color(name), width: 1, dash: "dot"},
        hovertemplate: g.map(hover)});
    }
  }
  const base = pts.filter((p) => p.is_base);
  if (base.length) traces.push({type: "scatter", mode: "markers", name: "base model", x: base.map((p) => p.L), y: base.map((p) => p.R),
    customdata: base.map((p) => p.trial_id), marker: {symbol: "star", size: 14, color: "#000"}, hovertemplate: base.map(hover)});
  plot(el, traces, {title: {text: "learning vs retention (faint: intermediate checkpoints)", font: {size: 13}},
    xaxis: {title: {text: `learning (${snap.learn_task || "L"})`}}, yaxis: {title: {text: `retention (${snap.retain_task || "R"})`}}});
}

function drawLr(el, m) {
  const color = colorOf(m), finals = m.points.filter((p) => p.final && !p.is_base && keep({...p, model: m.model}));
  const traces = [], shapes = [];
  for (const [name, g0] of groupBy(finals, seriesName)) {
    const g = g0.slice().sort((a, b) => a.lr - b.lr);
    const common = {type: "scatter", mode: "lines+markers", legendgroup: name, x: g.map((p) => p.lr), customdata: g.map((p) => p.trial_id), hovertemplate: g.map(hover)};
    traces.push({...common, name: `${name} retention`, y: g.map((p) => p.R), line: {color: color(name)}});
    traces.push({...common, name: `${name} learning`, y: g.map((p) => p.L), line: {color: color(name), dash: "dash"}, marker: {symbol: "square"}});
    for (const task of Object.keys((g[0] || {}).R_tasks || {})) {
      traces.push({...common, name: `${name} ${task}`, y: g.map((p) => p.R_tasks[task]), line: {color: color(name), dash: "dot", width: 1}, marker: {size: 4}, visible: "legendonly"});
    }
  }
  for (const s of m.series.filter(keep)) {
    const name = `${s.series} ${s.epochs}ep`;
    if (s.is_cliff && s.critical_lr_low) shapes.push(vline(Math.sqrt(s.critical_lr_low * s.critical_lr_high), color(name), "dash"));
    if (s.max_safe_lr) shapes.push(vline(s.max_safe_lr, color(name), "dot"));
  }
  plot(el, traces, {title: {text: "at the final checkpoint, against lr (dashed line: cliff; dotted: highest safe lr)", font: {size: 13}},
    xaxis: {type: "log", title: {text: "lr"}}, yaxis: {title: {text: "accuracy"}}, shapes});
}

const vline = (x, color, dash) => ({type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1, line: {color, dash, width: 1.5}});

function groupBy(items, key) {
  const out = new Map();
  for (const it of items) { const k = key(it); if (!out.has(k)) out.set(k, []); out.get(k).push(it); }
  return [...out.entries()].sort((a, b) => a[0].localeCompare(b[0]));
}

function plot(el, traces, layout) {
  Plotly.react(el, traces, {margin: {l: 55, r: 10, t: 36, b: 45}, hovermode: "closest", uirevision: "keep",
    legend: {font: {size: 10}}, font: {family: "system-ui, sans-serif"}, ...layout}, {displaylogo: false, responsive: true});
  if (!el.dataset.wired) {
    el.dataset.wired = "1";
    el.on("plotly_click", (ev) => { const p = ev.points[0]; if (p && p.customdata) openTrial(p.customdata); });
  }
}

async function openTrial(tid) {
  openTrialId = tid;
  const panel = $("trial");
  panel.style.display = "block";
  panel.innerHTML = `<span class="close" title="close">&times;</span><h2>${esc(tid)}</h2><div class="muted">loading...</div>`;
  panel.querySelector(".close").onclick = () => { panel.style.display = "none"; openTrialId = null; };
  const r = await fetch(`/api/trial/${encodeURIComponent(tid)}`);
  const v = await r.json();
  if (openTrialId !== tid) return;
  if (!r.ok) { panel.querySelector(".muted").textContent = v.error || `error ${r.status}`; return; }
  const t = v.trial;
  const settings = ["status", "model", "method", "optimizer", "lr", "epochs", "max_steps", "seed", "round", "attempt", "steps", "total_steps", "started_at", "finished_at", "final_loss", "error"]
    .filter((k) => t[k] !== null && t[k] !== undefined).map((k) => `<tr><th>${k}</th><td>${esc(k === "lr" ? lr(t[k]) : t[k])}</td></tr>`).join("");
  const params = t.method_params && Object.keys(t.method_params).length ? `<tr><th>method params</th><td>${esc(JSON.stringify(t.method_params))}</td></tr>` : "";
  const history = v.history.length ? v.history.map((h) => `<tr><td>${esc((h.at || "").slice(0, 19))}</td><td>${esc(h.kind)}</td><td>${esc(h.step)}</td><td><pre>${esc((h.message || "").slice(0, 400))}</pre></td></tr>`).join("") : `<tr><td colspan="4">no retries or errors recorded</td></tr>`;
  const cols = [...new Set(v.scores.flatMap((s) => Object.keys(s.values)))].sort();
  const scores = `<table class="scores"><tr><th>step</th>${cols.map((c) => `<th>${esc(c)}</th>`).join("")}</tr>` +
    v.scores.map((s) => `<tr><td>${s.step}</td>${cols.map((c) => `<td>${typeof s.values[c] === "string" ? esc(s.values[c]) : num(s.values[c])}</td>`).join("")}</tr>`).join("") + "</table>";
  const gens = v.generations.length ? v.generations.map((g) => `<tr class="generation"><td class="${g.correct ? "ok" : "bad"}">${g.correct ? "right" : "wrong"}</td><td>${esc(g.task)} ${esc(g.example_id)}</td>` +
    `<td><pre>${esc(g.prediction)}</pre></td><td><pre>${esc(g.reference ?? "(not kept)")}</pre></td></tr>`).join("") : `<tr><td colspan="4">none stored yet</td></tr>`;
  panel.innerHTML = `<span class="close" title="close">&times;</span><h2>${esc(tid)}</h2>` +
    `<h3>Settings</h3><table>${settings}${params}</table>` +
    `<h3>Status history and retries</h3><table><tr><th>at</th><th>what</th><th>step</th><th>message</th></tr>${history}</table>` +
    `<h3>Training curve</h3><div class="plot curve-plot" style="height:280px;width:100%"></div>` +
    `<h3>Every checkpoint's scores</h3>${scores}` +
    `<h3>Generations at its latest evaluated checkpoint</h3><table><tr><th></th><th>item</th><th>generated</th><th>reference</th></tr>${gens}</table>`;
  panel.querySelector(".close").onclick = () => { panel.style.display = "none"; openTrialId = null; };
  const curve = panel.querySelector(".curve-plot");
  if (v.curve.length) {
    await loadPlotly();
    if (openTrialId !== tid) return;
    Plotly.newPlot(curve, [{type: "scatter", mode: "lines", name: "loss", x: v.curve.map((c) => c.step), y: v.curve.map((c) => c.loss)},
      {type: "scatter", mode: "lines", name: "lr", yaxis: "y2", x: v.curve.map((c) => c.step), y: v.curve.map((c) => c.lr), line: {dash: "dot"}}],
    {margin: {l: 50, r: 50, t: 10, b: 40}, xaxis: {title: {text: "step"}}, yaxis: {title: {text: "loss"}},
      yaxis2: {overlaying: "y", side: "right", title: {text: "lr"}}, legend: {orientation: "h"}}, {displaylogo: false});
  } else {
    curve.outerHTML = `<div class="muted">no training curve in the store for this trial${t.status === "base model" ? " (the base model is not trained)" : ""}</div>`;
  }
}

poll();
