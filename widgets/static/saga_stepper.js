// Saga stepper (widgets/saga_stepper.py): buttons for the deployment saga's actions, then L_fwd and Σ
// (folded from the log by the kernel) beside the services' resources, counts and Φ's change since the
// saga began.
// `dal` is widgets/static/_shared.js, bundled in front of this file. Nothing here computes a value.
// The count header the kernel uses for lease refusals (kernel_lib.sim.saga_demo.LEASE_REFUSED).
const LEASE_REFUSED = "lease refused (401)";

// A bound call such as teardown_sandbox(sandbox_id=sandbox-0002) may break after "(" and ", " (and
// nowhere inside an id), so a narrow column wraps it instead of scrolling.
function callCell(td, row, key) {
  const text = dal.text(row[key]);
  if (key !== "call" && key !== "compensator") { td.textContent = text; return; }
  text.split(/(?<=\(|, )/).forEach((part, i) => {
    if (i) td.appendChild(document.createElement("wbr"));
    td.appendChild(document.createTextNode(part));
  });
}

function render({ model, el }) {
  dal.isolateKeys(el, "dal-saga-stepper");
  const kind = dal.make("select", "dal-kind");
  for (const k of model.get("kinds") || []) { const o = dal.make("option", "", k); o.value = k; kind.appendChild(o); }
  const target = dal.make("select", "dal-target");
  for (const [v, label] of [["forward", "on T_k"], ["compensator", "on C_k"]]) {
    const o = dal.make("option", "", label); o.value = v; target.appendChild(o);
  }
  const k = dal.make("input", "dal-number"); k.type = "number"; k.min = "1"; k.max = "5"; k.step = "1";
  k.dataset.name = "fault_step"; k.title = "k: the step (T_k) or its compensator (C_k)";
  const after = dal.make("input", "dal-number"); after.type = "number"; after.min = "1"; after.max = "5"; after.step = "1";
  after.dataset.name = "crash_after"; after.title = "compensators sent before the runner is abandoned";
  const send = dal.commander(model, () => ({ kind: kind.value, target: target.value, step: k.value, after: after.value }));
  const bar1 = dal.make("div", "dal-bar");
  bar1.append(dal.button("step forward", "step", send, "run the next forward step T_i"),
              dal.button("unwind", "unwind", send, "pop Σ until it is empty (or a compensator panics)"),
              dal.button("recover", "recover", send, "a new runner over the same log"),
              dal.button("refresh", "refresh", send));
  const bar2 = dal.make("div", "dal-bar");
  bar2.append(dal.button("inject fault", "inject", send, "queue the chosen fault on T_k or C_k"), kind, target,
              dal.make("span", "dal-label", "k ="), k);
  const bar3 = dal.make("div", "dal-bar");
  bar3.append(dal.button("crash during unwind", "crash_unwind", send,
                         "unwind, and abandon the runner right after this many compensators were sent"),
              dal.make("span", "dal-label", "after compensators:"), after);
  const status = dal.make("div", "dal-status");
  const summary = dal.make("div", "dal-summary");
  const msg = dal.make("div", "dal-error");
  const grid = dal.make("div", "dal-grid");
  const left = dal.make("div", "dal-col");
  const right = dal.make("div", "dal-col");
  const fwd = dal.make("table", "dal-forward");
  const stack = dal.make("table", "dal-stack");
  const res = dal.make("table", "dal-resources");
  const counts = dal.make("table", "dal-counts");
  const inv = dal.make("table", "dal-invariants");
  left.append(dal.make("div", "dal-caption", "L_fwd, folded from the log"), fwd,
              dal.make("div", "dal-caption", "Σ, folded from the log (top first)"), stack);
  const baseline = dal.make("div", "dal-note dal-baseline",
                            "none changed: Φ is where it was when this saga began (back to baseline)");
  right.append(dal.make("div", "dal-caption", "what the services hold for this saga"), res,
               dal.make("div", "dal-caption", "the services' own request counts since this saga began"), counts,
               dal.make("div", "dal-note", `${LEASE_REFUSED} counts only requests the service turned away at its ` +
                        "lease check; one it answered with an error of its own (a 409, a 503) is received and " +
                        "not applied"),
               dal.make("div", "dal-caption", "invariants Φ: change since this saga began (those that changed)"), inv,
               baseline);
  grid.append(left, right);
  el.append(bar1, bar2, bar3, status, summary, msg, grid);
  const controls = [[kind, "fault_kind"], [target, "fault_target"], [k, "fault_step"], [after, "crash_after"]];
  function syncControls() {
    for (const [box, name] of controls) {
      if (document.activeElement !== box) box.value = String(model.get(name));
    }
  }
  function draw() {
    const buttons = el.querySelectorAll("button");
    dal.showBusy(el, model, buttons, status);
    msg.textContent = model.get("error") || "";
    summary.textContent = model.get("summary") || "";
    el.dataset.sagaState = model.get("saga_state") || "";
    el.dataset.frozen = model.get("frozen") ? "true" : "false";
    const doubt = new Set(model.get("in_doubt") || []);
    dal.fillTable(fwd, ["step", "tool", "tier", "state", "compensator"], model.get("forward") || [],
                  { rowClass: (r) => (r.state === "PANIC" ? "dal-panic" : r.state === "FAILED" ? "dal-failed" : ""),
                    cell: callCell });
    dal.fillTable(stack, ["position", "compensator", "call", "state"], model.get("stack") || [],
                  { rowClass: (r) => (doubt.has(r.compensator) ? "dal-in-doubt" : ""), cell: callCell });
    dal.fillTable(res, ["service", "resource", "kind", "state", "created by"], model.get("resources") || [],
                  { rowClass: (r) => (r.state === "released" ? "dal-released" : "") });
    dal.fillTable(counts, ["service", "action", "received", "applied", LEASE_REFUSED], model.get("counts") || []);
    const phi = model.get("invariants") || [];     // only the invariants that changed (the kernel's delta)
    dal.fillTable(inv, ["service", "invariant", "before", "now", "change"], phi);
    inv.hidden = phi.length === 0;
    baseline.hidden = phi.length !== 0;
    syncControls();
  }
  dal.redrawOn(model, [...dal.COMMAND_TRAITS, "summary", "forward", "stack", "resources", "counts", "invariants",
                       "in_doubt", "saga_state", "frozen", "fault_kind", "fault_target", "fault_step", "crash_after"], draw);
  draw();
}
export default { render };
