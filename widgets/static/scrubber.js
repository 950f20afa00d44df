// Log scrubber (widgets/scrubber.py): a slider over log positions and the record folded up to it.
// `dal` is widgets/static/_shared.js, bundled in front of this file.
function render({ model, el }) {
  dal.isolateKeys(el, "dal-scrubber");
  const bar = document.createElement("div");
  const slider = Object.assign(document.createElement("input"), { type: "range", min: 0, step: 1 });
  slider.className = "dal-slider";
  const label = dal.make("span", "dal-label");
  bar.append(slider, label);
  const msg = dal.make("div", "dal-error");
  const table = dal.make("table", "dal-ops");
  const budget = dal.make("div", "dal-budget");
  el.append(bar, msg, table, budget);
  const columns = [{ key: "operation_id", label: "operation" }, { key: "kind", label: "kind" },
                   { key: "status", label: "status" }, { key: "attempt_id", label: "attempt" },
                   { key: "job_handle", label: "job handle" }, { key: "last_evidence", label: "last evidence" }];

  function draw() {
    const rec = model.get("record") || {};
    slider.max = model.get("max_position");
    slider.value = model.get("position");
    label.textContent = ` position ${model.get("position")} / ${model.get("max_position")}  ` +
      (model.get("last_event") || "");
    msg.textContent = model.get("error") || "";
    dal.fillTable(table, columns, rec.operations || [],
                  { rowClass: (op) => (op.status === "in_doubt" ? "dal-in-doubt" : "") });
    budget.textContent = model.get("budget_line") || "";
  }
  slider.addEventListener("input", () => {
    model.set("position", Number(slider.value));
    model.save_changes();
  });
  dal.redrawOn(model, ["record", "error", "position", "last_event", "budget_line"], draw);
  draw();
}
export default { render };
