// Crash panel (widgets/crash_panel.py): buttons for the crash worksheet's steps, the log tail and
// the folded operation table. `dal` is widgets/static/_shared.js, bundled in front of this file.
function render({ model, el }) {
  dal.isolateKeys(el, "dal-crash-panel");
  const bar = document.createElement("div");
  const sel = dal.make("select", "dal-position");
  const send = dal.commander(model, () => ({ position: sel.value }));
  // every position of the trajectory, {value: "N", label: "N TYPE#K (subject)"}; Python validates
  for (const p of model.get("positions") || []) {
    const o = dal.make("option", "", p.label); o.value = p.value; sel.appendChild(o);
  }
  sel.value = model.get("position");
  sel.addEventListener("change", () => { model.set("position", sel.value); model.save_changes(); });
  model.on("change:position", () => { sel.value = model.get("position"); });
  bar.append(dal.button("start", "start", send), dal.button("crash now", "crash", send),
             dal.button("crash at", "crash_at", send), sel,
             dal.button("recover", "recover", send), dal.button("reconcile", "reconcile", send));
  const status = dal.make("div", "dal-status");
  const summary = dal.make("div", "dal-summary");
  const msg = dal.make("div", "dal-error");
  const ops = dal.make("table", "dal-ops");
  const tail = dal.make("table", "dal-tail");
  const opsHead = dal.make("div", "dal-caption", "operations, as the surviving log folds (in doubt highlighted)");
  const tailHead = dal.make("div", "dal-caption", "last events of the surviving log");
  el.append(bar, status, summary, msg, opsHead, ops, tailHead, tail);
  function draw() {
    dal.showBusy(el, model, bar.querySelectorAll("button"), status);
    msg.textContent = model.get("error") || "";
    summary.textContent = model.get("summary") || "";
    // headers for people; the keys are the fold's and the log's field names
    dal.fillTable(ops, [{ key: "operation_id", label: "operation" }, { key: "kind", label: "kind" },
                        { key: "status", label: "status" }, { key: "attempt_id", label: "attempt" },
                        { key: "job_handle", label: "job handle" }, { key: "last_evidence", label: "last evidence" }],
                  model.get("operations") || [],
                  { rowClass: (r) => (r.status === "in_doubt" ? "dal-in-doubt" : "") });
    dal.fillTable(tail, [{ key: "sequence", label: "position" }, { key: "type", label: "event" },
                         { key: "operation_id", label: "operation" }, { key: "subject_id", label: "subject" },
                         { key: "status", label: "status" }, { key: "job_handle", label: "job handle" },
                         { key: "owner_epoch", label: "owner epoch" }],
                  model.get("log_tail") || []);
  }
  dal.redrawOn(model, [...dal.COMMAND_TRAITS, "summary", "operations", "log_tail"], draw);
  draw();
}
export default { render };
