// Lifeline stepper (widgets/lifeline_stepper.py): figure 5's protocol ladder as SVG, one message at a time.
// The four lifelines, the messages, the legend's words and the turn labels all come from the kernel
// (kernel_lib.recovery.synthesis.lifelines); this file lays them out and sends the reader's moves back.
// `dal` is widgets/static/_shared.js, bundled in front of this file. Nothing here computes a value.
// the SVG namespace as the HTML parser assigns it to an inline <svg> (no URL written in this bundle)
const SVG_NS = (() => { const d = document.createElement("div"); d.innerHTML = "<svg></svg>"; return d.firstChild.namespaceURI; })();
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// layout (pixels of the SVG's own coordinates; the picture scales to the widget's width)
const GUTTER = 118, COL = 200, HEAD = 46, ROW = 24, TURN_GAP = 22;

function render({ model, el }) {
  dal.isolateKeys(el, "dal-lifeline-stepper");
  const send = dal.commander(model, () => ({ to: Number(slider.value), turn: Number(turnSel.value) }));
  const bar = dal.make("div", "dal-bar");
  const slider = Object.assign(dal.make("input", "dal-slider"), { type: "range", min: 1, step: 1 });
  slider.title = "scrub through the messages";
  const turnSel = dal.make("select", "dal-turn");
  turnSel.title = "jump to the first message of a turn";
  bar.append(dal.button("« first", "first", send, "the first message"),
             dal.button("◀ prev", "prev", send, "the message before this one"),
             dal.button("next ▶", "next", send, "the next message"),
             dal.button("last »", "last", send, "the last message"), slider,
             dal.make("span", "dal-label", "turn"), turnSel);
  slider.addEventListener("change", () => send("goto"));
  turnSel.addEventListener("change", () => send("turn"));
  const title = dal.make("div", "dal-title");
  const status = dal.make("div", "dal-status");
  const msg = dal.make("div", "dal-error");
  const scroller = dal.make("div", "dal-ladder");
  const detail = dal.make("div", "dal-detail");
  const legend = dal.make("div", "dal-legend");
  el.append(title, bar, status, msg, scroller, detail, legend);
  let drawnFor = null;
  let rows = [];

  function xOf(id) {
    const i = (model.get("lifelines") || []).findIndex((l) => l.id === id);
    return GUTTER + (i + 0.5) * COL;
  }

  // the whole ladder, drawn once per set of messages; stepping only changes classes
  function drawLadder() {
    const lifelines = model.get("lifelines") || [];
    const messages = model.get("messages") || [];
    const W = GUTTER + COL * lifelines.length;
    let y = HEAD, lastTurn = null;
    const ys = [], turnMarks = [];
    for (const m of messages) {
      if (m.turn !== lastTurn) { y += TURN_GAP; turnMarks.push([m.turn, y - TURN_GAP / 2]); lastTurn = m.turn; }
      y += ROW; ys.push(y);
    }
    const H = y + 16;
    const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, class: "dal-ladder-svg" });
    const defs = svg("defs");
    const marker = svg("marker", { id: "dal-ll-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 9,
                                   markerHeight: 9, markerUnits: "userSpaceOnUse",
                                   orient: "auto-start-reverse" });
    marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "dal-ll-head" }));
    defs.append(marker);
    s.append(defs);
    const turnLabels = new Map((model.get("turns") || []).map((t) => [t.turn, t.label]));
    for (const [turn, ty] of turnMarks) {
      s.append(svg("line", { x1: 4, x2: W - 4, y1: ty, y2: ty, class: "dal-ll-turnline" }));
      s.append(svg("text", { x: 6, y: ty + 10, class: "dal-ll-turn" }, turnLabels.get(turn) || `turn ${turn}`));
    }
    lifelines.forEach((l) => {
      const x = xOf(l.id);
      s.append(svg("line", { x1: x, x2: x, y1: HEAD - 8, y2: H - 6, class: "dal-ll-line" }));
      s.append(svg("rect", { x: x - COL / 2 + 8, y: 4, width: COL - 16, height: HEAD - 16, rx: 5, class: "dal-ll-box" }));
      s.append(svg("text", { x, y: 4 + (HEAD - 16) / 2 + 4, "text-anchor": "middle", class: "dal-ll-name" }, l.label));
    });
    rows = messages.map((m, i) => {
      const g = svg("g", { class: `dal-ll-msg k-${m.kind}`, "data-index": i });
      const yy = ys[i];
      g.append(svg("rect", { x: 2, y: yy - ROW + 4, width: W - 4, height: ROW - 2, class: "dal-ll-row" }));
      g.append(svg("text", { x: 8, y: yy - 2, class: "dal-ll-pos" },
                   m.position === null || m.position === undefined ? "·" : `#${m.position}`));
      const x1 = xOf(m.source), x2 = xOf(m.target);
      if (m.source === m.target) {
        const right = x1 < GUTTER + COL * (lifelines.length - 1);      // the rightmost lifeline loops to its left
        const dx = right ? 26 : -26;
        if (m.kind === "crash") {
          g.append(svg("line", { x1: x1 - 9, x2: x1 + 9, y1: yy - 13, y2: yy + 1, class: "dal-ll-cross" }));
          g.append(svg("line", { x1: x1 - 9, x2: x1 + 9, y1: yy + 1, y2: yy - 13, class: "dal-ll-cross" }));
        } else {
          g.append(svg("path", { d: `M${x1},${yy - 12} h${dx} v10 h${-dx}`, class: "dal-ll-arrow",
                                 "marker-end": "url(#dal-ll-arrow)" }));
        }
        g.append(svg("text", { x: x1 + (right ? 32 : -32), y: yy - 4, "text-anchor": right ? "start" : "end",
                               class: "dal-ll-label" }, m.label));
      } else {
        g.append(svg("line", { x1, x2: x2 + (x2 > x1 ? -2 : 2), y1: yy - 4, y2: yy - 4,
                               class: "dal-ll-arrow", "marker-end": "url(#dal-ll-arrow)" }));
        const lx = Math.min(x1, x2) + 6;
        g.append(svg("text", { x: lx, y: yy - 8, class: "dal-ll-label" }, m.label));
      }
      g.addEventListener("click", () => { slider.value = String(i + 1); send("goto"); });
      s.append(g);
      return { g, y: yy };
    });
    scroller.replaceChildren(s);
    drawnFor = messages;
  }

  function drawLegend() {
    legend.replaceChildren(dal.make("div", "dal-caption", "legend"));
    for (const r of model.get("legend") || []) {
      const item = dal.make("div", `dal-legend-item k-${r.kind}`);
      const sw = svg("svg", { width: 26, height: 10, class: "dal-swatch" });
      sw.append(svg("line", { x1: 1, x2: 25, y1: 5, y2: 5, class: "dal-ll-arrow" }));
      item.append(sw, dal.make("b", "", r.kind), document.createTextNode(` ${r.meaning}`));
      legend.append(item);
    }
  }

  function drawDetail(m) {
    detail.replaceChildren();
    if (!m || !m.label) return;
    const rowsOut = [["message", `${m.from} → ${m.to}`], ["what", m.detail || m.label],
                     ["kind", `${m.kind}: ${m.meaning || ""}`], ["turn", m.turn_label || String(m.turn)],
                     ["log position", m.position === null || m.position === undefined ? "none (not in the log)"
                                                                                       : String(m.position)],
                     ["from event", m.event_type || "(none: the log cannot record it)"],
                     ["operation", m.operation_id || ""]];
    const t = dal.make("table", "dal-detail-table");
    for (const [k, v] of rowsOut) {
      const tr = t.insertRow();
      tr.appendChild(dal.make("th", "", k));
      tr.appendChild(dal.make("td", "", v));
    }
    detail.append(t);
  }

  function draw() {
    const messages = model.get("messages") || [];
    if (drawnFor !== messages) drawLadder();
    const buttons = el.querySelectorAll("button");
    dal.showBusy(el, model, buttons, status);
    status.textContent = (model.get("busy") ? "working… " : "") + (model.get("readout") || "");
    title.textContent = model.get("title") || "";
    title.hidden = !model.get("title");
    msg.textContent = model.get("error") || "";
    const k = Number(model.get("step")) || 1;
    el.dataset.step = String(k);
    slider.max = String(messages.length);
    if (document.activeElement !== slider) slider.value = String(k);
    const turns = model.get("turns") || [];
    if (turnSel.options.length !== turns.length) {
      turnSel.replaceChildren(...turns.map((t) => { const o = dal.make("option", "", t.label); o.value = t.turn; return o; }));
    }
    const cur = messages[k - 1];
    if (cur && document.activeElement !== turnSel) turnSel.value = String(cur.turn);
    rows.forEach((r, i) => {
      r.g.classList.toggle("dal-ll-current", i === k - 1);
      r.g.classList.toggle("dal-ll-future", i > k - 1);
    });
    const row = rows[k - 1];
    if (row) {     // keep the current message in view inside the ladder's own scroll box
      const svgEl = scroller.firstChild;
      const scale = svgEl && svgEl.viewBox && svgEl.viewBox.baseVal.width
        ? svgEl.getBoundingClientRect().width / svgEl.viewBox.baseVal.width : 1;
      const want = row.y * scale - scroller.clientHeight / 2;
      if (Math.abs(scroller.scrollTop - want) > scroller.clientHeight / 3) scroller.scrollTop = Math.max(0, want);
    }
    drawDetail(model.get("current"));
  }
  dal.redrawOn(model, [...dal.COMMAND_TRAITS, "step", "current", "readout", "messages", "turns", "title"], draw);
  dal.redrawOn(model, ["legend"], drawLegend);
  drawLegend();
  draw();
}
export default { render };
