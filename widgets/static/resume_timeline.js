// Resume timeline (widgets/resume_timeline.py): the prefill givens as number boxes, the Gantt chart
// the kernel drew, the readout and the stage table. `dal` is widgets/static/_shared.js, bundled in
// front of this file.
function render({ model, el }) {
  dal.isolateKeys(el, "dal-resume");
  const grid = dal.make("div", "dal-controls");
  const msg = dal.make("div", "dal-error");
  const notice = dal.make("div", "dal-notice");
  const readout = dal.make("ul", "dal-readout");
  const chart = dal.make("div", "dal-chart");
  const table = dal.make("table", "dal-stages");
  el.append(grid, msg, notice, readout, chart, table);
  const boxes = {};
  const typing = new Set();   // boxes typed in since their last commit: a redraw must not overwrite them
  for (const g of model.get("givens_spec")) {
    const row = dal.make("div", "dal-row"); row.dataset.name = g.name;
    const label = dal.make("label", "", `${g.label} (${g.name})`);
    const box = Object.assign(document.createElement("input"), { type: "number", step: g.integer ? "1" : "any" });
    box.className = "dal-number"; box.dataset.name = g.name;
    const unit = dal.make("span", "dal-unit", `${g.unit}, given`);
    row.append(label, box, unit); grid.appendChild(row);
    dal.commitBox(box, () => {      // committed: show what the model keeps (a refused value goes back)
      const v = box.value.trim() === "" ? null : Number(box.value);
      model.set(g.name, v === null || Number.isNaN(v) ? null : v); model.save_changes();
    }, typing);
    boxes[g.name] = box;
  }
  function drawInputs() {
    for (const [name, box] of Object.entries(boxes)) {
      if (!dal.typedIn(box, typing)) box.value = dal.text(model.get(name));
    }
  }
  function drawOutputs() {
    drawInputs();
    msg.textContent = model.get("error") || "";
    notice.textContent = model.get("notice") || "";
    readout.replaceChildren();
    for (const line of model.get("readout_lines") || []) readout.appendChild(dal.make("li", "", line));
    chart.innerHTML = model.get("chart_svg") || "";
    dal.fillTable(table, ["stage", "duration", "source", { key: "after", label: "starts after" }, "critical",
                          "detail"],
                  model.get("stage_cells") || [], { rowClass: (r) => (r.is_critical ? "dal-critical" : "") });
    el.dataset.revision = String(model.get("revision") || 0);
  }
  dal.redrawOn(model, Object.keys(boxes), drawInputs);
  dal.redrawOn(model, ["error", "notice", "readout_lines", "chart_svg", "stages", "revision"], drawOutputs);
  drawOutputs();
}
export default { render };
