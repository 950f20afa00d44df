// Watchdog view (widgets/watchdog_view.py): a slider over a trajectory's steps; the state-hash
// window, the metric series, the action hashes and every detector's lane are what the kernel
// published for that step (kernel_lib.recovery.watchdog.timeline). `dal` is _shared.js.
// the SVG namespace as the HTML parser assigns it to an inline <svg> (no URL written in this bundle)
const SVG = (() => { const d = document.createElement("div"); d.innerHTML = "<svg></svg>"; return d.firstChild.namespaceURI; })();
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
const LEFT = 170, RIGHT = 12, LANE_H = 22;

function render({ model, el }) {
  dal.isolateKeys(el, "dal-watchdog");
  const title = dal.make("div", "dal-title");
  const bar = dal.make("div", "dal-bar");
  const prev = dal.make("button", "dal-btn", "◀ detection");
  prev.dataset.action = "prev";
  const slider = Object.assign(document.createElement("input"), { type: "range", min: 0, step: 1 });
  slider.className = "dal-slider";
  const next = dal.make("button", "dal-btn", "detection ▶");
  next.dataset.action = "next";
  const label = dal.make("span", "dal-label");
  bar.append(prev, slider, next, label);
  const msg = dal.make("div", "dal-error");
  const readout = dal.make("ul", "dal-readout");
  const lanes = dal.make("div", "dal-lanes");
  const metrics = dal.make("div", "dal-metrics");
  const panels = dal.make("div", "dal-panels");
  const winBox = dal.make("div", "dal-panel");
  const winTable = dal.make("table", "dal-window");
  winBox.append(dal.make("div", "dal-head", "state-hash window W (oldest first)"), winTable);
  const actBox = dal.make("div", "dal-panel");
  const actTable = dal.make("table", "dal-actions");
  actBox.append(dal.make("div", "dal-head", "action hashes h_tool (recent steps)"), actTable);
  panels.append(winBox, actBox);
  const detBox = dal.make("div", "dal-panel dal-wide");
  const detTable = dal.make("table", "dal-detections");
  detBox.append(dal.make("div", "dal-head", "every detection"), detTable);
  el.append(title, bar, msg, readout, lanes, metrics, panels, detBox);

  const send = (v) => { model.set("step", v); model.save_changes(); };
  slider.addEventListener("input", () => send(Number(slider.value)));
  const marks = () => [...new Set((model.get("view").detections || []).map((d) => d.step))].sort((a, b) => a - b);
  prev.addEventListener("click", () => {
    const s = model.get("step"); const m = marks().filter((x) => x < s);
    if (m.length) send(m[m.length - 1]);
  });
  next.addEventListener("click", () => {
    const s = model.get("step"); const m = marks().filter((x) => x > s);
    if (m.length) send(m[0]);
  });

  function xOf(step, n, width) { return LEFT + (n <= 1 ? 0 : (step - 1) / (n - 1)) * (width - LEFT - RIGHT); }

  function drawLanes(view) {
    const dets = model.get("detectors") || [];
    const n = view.n_steps, width = 760, height = LANE_H * dets.length + 24;
    const s = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "dal-lane-svg" });
    dets.forEach((d, row) => {
      const y = 12 + row * LANE_H + LANE_H / 2;
      s.appendChild(svg("text", { x: 4, y: y + 4, class: "dal-lane-label" }, d.label));
      s.appendChild(svg("line", { x1: LEFT, x2: width - RIGHT, y1: y, y2: y, class: "dal-lane-line" }));
      // one mark per step of a lane: the detections of one detector at one step share it (its title lists them)
      const byStep = new Map();
      for (const f of (view.detections || []).filter((x) => x.detector === d.detector)) {
        if (!byStep.has(f.step)) byStep.set(f.step, []);
        byStep.get(f.step).push(f);
      }
      for (const [step, fs] of byStep) {
        const fired = fs.some((f) => f.fired), here = fs.some((f) => f.here);
        const c = svg("circle", { cx: xOf(step, n, width), cy: y, r: here ? 7 : 5,
                                  class: "dal-mark" + (fired ? " dal-fired" : "") + (here ? " dal-here" : "") });
        c.dataset.step = String(step); c.dataset.detector = d.detector; c.dataset.count = String(fs.length);
        c.appendChild(svg("title", {}, fs.map((f) => `${d.label}: ${f.kind} at log #${f.position} (step ${f.step}) — ${f.summary}`).join("\n")));
        c.addEventListener("click", () => send(step));
        s.appendChild(c);
      }
    });
    if (view.step > 0) {
      const x = xOf(view.step, n, width);
      s.appendChild(svg("line", { x1: x, x2: x, y1: 4, y2: height - 14, class: "dal-cursor" }));
    }
    s.appendChild(svg("text", { x: LEFT, y: height - 2, class: "dal-axis" }, "step 1"));
    s.appendChild(svg("text", { x: width - RIGHT, y: height - 2, class: "dal-axis", "text-anchor": "end" }, `step ${n}`));
    lanes.replaceChildren(s);
  }

  function drawMetrics(view) {
    const m = view.metrics || {}; const names = m.names || []; const series = m.series || [];
    if (!names.length) { metrics.replaceChildren(dal.make("div", "dal-note", "no verifier metric measured up to this step")); return; }
    const n = view.n_steps, width = 760, height = 120, top = 8, bottom = 20;
    let hi = 0;
    for (const r of series) for (const k of names) if (typeof r[k] === "number") hi = Math.max(hi, r[k]);
    hi = hi || 1;
    const yOf = (v) => top + (1 - v / hi) * (height - top - bottom);
    const s = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "dal-metric-svg" });
    s.appendChild(svg("text", { x: 4, y: 14, class: "dal-lane-label" }, "verifier metrics"));
    s.appendChild(svg("text", { x: LEFT - 6, y: yOf(hi) + 4, class: "dal-axis", "text-anchor": "end" }, dal.text(hi)));
    s.appendChild(svg("text", { x: LEFT - 6, y: yOf(0) + 4, class: "dal-axis", "text-anchor": "end" }, "0"));
    names.forEach((k, j) => {
      const pts = series.filter((r) => typeof r[k] === "number").map((r) => [xOf(r.step, n, width), yOf(r[k])]);
      const color = COLORS[j % COLORS.length];
      if (pts.length > 1) s.appendChild(svg("polyline", { points: pts.map((p) => p.join(",")).join(" "), fill: "none", stroke: color, "stroke-width": 1.5 }));
      for (const [x, y] of pts) s.appendChild(svg("circle", { cx: x, cy: y, r: 2.5, fill: color }));
      const dir = (m.directions || {})[k] > 0 ? "↑ better" : "↓ better";
      s.appendChild(svg("text", { x: 4, y: 32 + 14 * j, fill: color, class: "dal-legend" }, `${k} (${dir})`));
    });
    if (view.step > 0) {
      const x = xOf(view.step, n, width);
      s.appendChild(svg("line", { x1: x, x2: x, y1: top, y2: height - bottom, class: "dal-cursor" }));
    }
    metrics.replaceChildren(s);
  }

  function draw() {
    const view = model.get("view") || {};
    title.textContent = model.get("name") ? `log: ${model.get("name")}` : "";
    slider.max = model.get("max_step");
    slider.value = model.get("step");
    label.textContent = ` step ${model.get("step")} / ${model.get("max_step")}` + (view.position ? `  (log #${view.position})` : "");
    msg.textContent = model.get("error") || "";
    readout.replaceChildren(...(model.get("readout") || []).map((t) => dal.make("li", "", t)));
    drawLanes(view);
    drawMetrics(view);
    const w = view.state_window || { entries: [] };
    const rows = (w.entries || []).map((e) => ({ ...e, match: !e.matches ? ""
      : e.distance === w.period ? `k = ${e.distance}: the first match` : `equal too (k = ${e.distance})` }));
    if (view.step > 0) rows.push({ step: view.step, position: view.position, state_hash: w.current_hash || "—",
                                   distance: 0, match: w.counted ? "(this step)" : "(this step: not compared)", current: true });
    dal.fillTable(winTable, [{ key: "distance", label: "t − k" }, { key: "step", label: "step" },
                             { key: "position", label: "log #" }, { key: "state_hash", label: "state hash" },
                             { key: "match", label: "match" }], rows,
                  { rowClass: (r) => (r.current ? "dal-current" : r.matches ? "dal-match" : "") });
    dal.fillTable(actTable, [{ key: "step", label: "step" }, { key: "position", label: "log #" },
                             { key: "tool", label: "tool" }, { key: "signature", label: "h_tool" },
                             { key: "err", label: "observation" }],
                  (view.actions || []).map((a) => ({ ...a, err: a.error ? "error" : "ok" })),
                  { rowClass: (a) => (a.step === view.step ? "dal-current" : a.same_as_current ? "dal-match" : a.error ? "dal-err" : "") });
    const labels = Object.fromEntries((model.get("detectors") || []).map((d) => [d.detector, d.label]));
    dal.fillTable(detTable, [{ key: "who", label: "detector" }, { key: "kind", label: "kind" },
                             { key: "position", label: "log #" }, { key: "step", label: "step" },
                             { key: "tierText", label: "tier" }, { key: "summary", label: "evidence" }],
                  (view.detections || []).map((d) => ({ ...d, who: labels[d.detector] || d.detector,
                                                        tierText: d.tier === null || d.tier === undefined ? "—" : String(d.tier) })),
                  { rowClass: (d) => (d.here ? "dal-current" : d.fired ? "dal-fired-row" : "dal-later"),
                    rowData: (d) => ({ step: String(d.step), detector: d.detector }) });
  }
  dal.redrawOn(model, ["view", "readout", "error", "step", "max_step", "name"], draw);
  draw();
}
export default { render };
