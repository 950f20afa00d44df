// Breaker dashboard (widgets/breaker_dashboard.py): one circuit breaker's state, the window's
// failure rate E against tau_fail, the cooldown and the transitions, as the kernel's CircuitBreaker
// reports them. Buttons step a breaker on a virtual clock, or dial a live lab's service.
// `dal` is widgets/static/_shared.js, bundled in front of this file. Nothing here computes a value.
// the SVG namespace as the HTML parser assigns it to an inline <svg> (no URL written in this bundle)
const SVG = (() => { const d = document.createElement("div"); d.innerHTML = "<svg></svg>"; return d.firstChild.namespaceURI; })();
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}
const STATE_COLORS = { closed: "#2e7d32", open: "#c62828", half_open: "#ef8f00" };
const LABELS = { closed: "Closed", open: "Open", half_open: "Half-Open" };
const num = (v, d = 2) => (typeof v === "number" && Number.isFinite(v) ? v.toFixed(d) : "");

function numberBox(name, title, step) {
  const b = dal.make("input", "dal-number");
  b.type = "number"; b.step = step; b.dataset.name = name; b.title = title;
  return b;
}

function render({ model, el }) {
  dal.isolateKeys(el, "dal-breaker");
  const live = model.get("mode") === "live";
  const send = dal.commander(model);
  const typing = new Set();
  const bar = dal.make("div", "dal-bar");
  const boxes = [];
  const commit = (box) => () => {
    const v = box.value.trim() === "" ? box.value : Number(box.value);
    model.set(box.dataset.name, v); model.save_changes();
  };
  if (live) {
    const lat = numberBox("latency_s", "the service's latency (s); past the call timeout every call times out", "0.1");
    const err = numberBox("error_rate", "the share of calls the service answers 503 (0 to 1)", "0.1");
    for (const b of [lat, err]) { dal.commitBox(b, commit(b), typing); boxes.push(b); }
    bar.append(dal.button("refresh", "refresh", send, "read the breaker again"),
               dal.make("span", "dal-label", "latency (s)"), lat, dal.make("span", "dal-label", "error rate"), err,
               dal.button("dial the service", "dial", send, "turn the live service's dials now"));
  } else {
    const adv = numberBox("advance_s", "seconds the virtual clock moves", "1");
    dal.commitBox(adv, commit(adv), typing); boxes.push(adv);
    bar.append(dal.button("call succeeds", "success", send, "one call: a permit, then a success"),
               dal.button("call fails", "failure", send, "one call: a permit, then a transport failure (timeout, 5xx)"),
               dal.button("advance clock", "advance", send, "move the virtual clock and apply what is due"), adv,
               dal.make("span", "dal-label", "s"),
               dal.button("reset", "reset", send, "a new closed breaker, clock at 0 s"));
  }
  const status = dal.make("div", "dal-status");
  const msg = dal.make("div", "dal-error");
  const head = dal.make("div", "dal-head");
  const badge = dal.make("span", "dal-state");
  const clock = dal.make("span", "dal-clock");
  head.append(badge, clock);
  const rate = dal.make("div", "dal-rate");
  const rateText = dal.make("div", "dal-rate-text");
  const win = dal.make("div", "dal-window");
  const cool = dal.make("div", "dal-cooldown");
  const coolText = dal.make("div", "dal-cool-text");
  const readout = dal.make("ul", "dal-readout");
  const tl = dal.make("div", "dal-timeline");
  const trTable = dal.make("table", "dal-transitions");
  el.append(bar, status, msg, head, rateText, rate, win, coolText, cool, readout,
            dal.make("div", "dal-caption", "state over time (one segment per transition)"), tl,
            dal.make("div", "dal-caption", "transitions, as the breaker recorded them"), trTable);

  function drawRate(b) {
    const W = 420, H = 18;
    const s = svg("svg", { width: W, height: H + 14, viewBox: `0 0 ${W} ${H + 14}` });
    s.append(svg("rect", { x: 0, y: 0, width: W, height: H, fill: "#eee", stroke: "#bbb" }));
    const counted = b.calls >= b.minimum_calls;
    s.append(svg("rect", { class: "dal-rate-fill", x: 0, y: 0, width: W * (b.failure_rate || 0), height: H,
                          fill: counted ? "#e57373" : "#bdbdbd" }));
    const x = W * b.tau_fail;
    s.append(svg("line", { x1: x, x2: x, y1: -2, y2: H + 2, stroke: "#000", "stroke-width": 2 }));
    s.append(svg("text", { x: Math.min(x, W - 60), y: H + 12, class: "dal-axis" }, `tau_fail ${num(b.tau_fail)}`));
    rate.replaceChildren(s);
    rateText.textContent = b.state === "closed"
      ? `E = ${num(b.failure_rate)} over ${b.calls} call(s) of W = ${b.window_size}` +
        (counted ? "" : ` (no rate counts below ${b.minimum_calls} calls)`)
      : `window emptied when the breaker left Closed (E counts again after it closes)`;
  }

  function drawWindow(b) {
    const items = model.get("window") || [];
    win.replaceChildren();
    if (b.window_kind !== "count" || b.state !== "closed") { win.hidden = true; return; }
    win.hidden = false;
    win.append(dal.make("span", "dal-label", "W, oldest first:"));
    for (let i = 0; i < b.window_size; i++) {
      const it = items[i];
      const cell = dal.make("span", "dal-cell " + (it ? (it.failure ? "dal-fail" : "dal-ok") : "dal-empty"),
                            it ? (it.failure ? "1" : "0") : "");
      cell.title = it ? (it.failure ? "failure (e = 1)" : "success (e = 0)") : "empty slot";
      win.append(cell);
    }
  }

  function drawCooldown(b) {
    const W = 420, H = 10;
    const s = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    s.append(svg("rect", { x: 0, y: 0, width: W, height: H, fill: "#eee", stroke: "#bbb" }));
    const left = b.state === "open" && b.cooldown_s > 0 ? b.cooldown_remaining_s / b.cooldown_s : 0;
    s.append(svg("rect", { class: "dal-cool-fill", x: 0, y: 0, width: W * left, height: H, fill: STATE_COLORS.open }));
    cool.replaceChildren(s);
    coolText.textContent = `cooldown ${num(b.cooldown_s, 1)} s (base ${num(b.base_cooldown_s, 1)} s, cap ` +
      `${num(b.cooldown_max_s, 1)} s)` + (b.state === "open" ? `; remaining ${num(b.cooldown_remaining_s, 1)} s` : "") +
      (b.state === "half_open" ? `; canaries in flight ${b.canaries_in_flight} of ${b.half_open_permits}` : "");
  }

  function drawTimeline(b) {
    const segs = model.get("timeline") || [];
    const W = 640, H = 22, L = 4, R = 40;
    const end = Math.max(b.now_s || 0, ...segs.map((g) => g.to_s), 1e-9);
    const x = (t) => L + (t / end) * (W - L - R);
    const s = svg("svg", { width: W, height: H + 16, viewBox: `0 0 ${W} ${H + 16}` });
    for (const g of segs) {
      const r = svg("rect", { class: "dal-seg", x: x(g.from_s), y: 0, width: Math.max(1, x(g.to_s) - x(g.from_s)),
                              height: H, fill: STATE_COLORS[g.state] || "#999" });
      r.dataset.state = g.state;
      r.append(svg("title", {}, `${LABELS[g.state]} from ${num(g.from_s)} s to ${num(g.to_s)} s`));
      s.append(r);
    }
    s.append(svg("text", { x: L, y: H + 13, class: "dal-axis" }, "0 s"));
    s.append(svg("text", { x: W - R - 20, y: H + 13, class: "dal-axis" }, `${num(end, 1)} s`));
    tl.replaceChildren(s);
  }

  function draw() {
    const buttons = el.querySelectorAll("button");
    dal.showBusy(el, model, buttons, status);
    msg.textContent = model.get("error") || "";
    const b = model.get("breaker") || {};
    el.dataset.state = b.state || "";
    badge.textContent = b.state_label || "";
    badge.style.background = STATE_COLORS[b.state] || "#999";
    clock.textContent = `${b.dependency_id || ""} · t = ${num(b.now_s)} s` +
      (live ? ` · lab phase: ${model.get("lab_phase") || ""}` : " (virtual clock)");
    if (b.state) { drawRate(b); drawWindow(b); drawCooldown(b); drawTimeline(b); }
    readout.replaceChildren(...(model.get("readout") || []).map((t) => dal.make("li", "", t)));
    dal.fillTable(trTable, [{ key: "t", label: "t (s)" }, "from", "to", "reason", { key: "cool", label: "cooldown (s)" },
                            { key: "E", label: "E when tripped" }],
                  (model.get("transitions") || []).map((t) => ({
                    t: num(t.t_s), from: LABELS[t.from_state], to: LABELS[t.to_state], reason: t.reason,
                    cool: num(t.cooldown_s, 1), E: t.failure_rate === null ? "" : `${num(t.failure_rate)} of ${t.calls}`,
                    state: t.to_state })),
                  { rowClass: (r) => `dal-to-${r.state}` });
    for (const box of boxes) {
      if (!dal.typedIn(box, typing)) box.value = dal.text(model.get(box.dataset.name));
    }
  }
  dal.redrawOn(model, [...dal.COMMAND_TRAITS, "breaker", "window", "transitions", "timeline", "readout", "lab_phase",
                       "advance_s", "latency_s", "error_rate"], draw);
  draw();
}
export default { render };
