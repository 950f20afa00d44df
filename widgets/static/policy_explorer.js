// Policy explorer (widgets/policy_explorer.py): a slider and a number box per cost, p and budget, a
// checkbox for the pivot and a choice of error class; the decision, its numbers and the chart are
// what the kernel computed with kernel_lib.recovery.policy.decide. `dal` is widgets/static/_shared.js.
function fmt(v) {
  if (v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v))) return "";
  return typeof v === "number" ? String(Number(v.toPrecision(6))) : String(v);
}
function render({ model, el }) {
  dal.isolateKeys(el, "dal-policy");
  const grid = dal.make("div", "dal-controls");
  const head = dal.make("div", "dal-directive");
  const msg = dal.make("div", "dal-error");
  const notice = dal.make("div", "dal-notice");
  const readout = dal.make("ul", "dal-readout");
  const chart = dal.make("div", "dal-chart");
  el.append(grid, head, msg, notice, readout, chart);
  const rows = {};
  const STEPS = 1000;
  const send = (name, v) => { model.set(name, v); model.save_changes(); };
  for (const s of model.get("sliders")) {
    const row = dal.make("div", "dal-row"); row.dataset.name = s.name;
    const label = dal.make("label", "", `${s.label} (${s.name})`);
    row.appendChild(label);
    let input;
    if (s.kind === "bool") {
      input = Object.assign(document.createElement("input"), { type: "checkbox" });
      input.className = "dal-check"; input.dataset.name = s.name;
      input.addEventListener("change", () => send(s.name, input.checked));
      row.appendChild(input);
      rows[s.name] = { row, input, set: (v) => { input.checked = v === true; } };
    } else if (s.kind === "class") {
      input = document.createElement("select");
      input.className = "dal-select"; input.dataset.name = s.name;
      for (const c of s.choices) input.appendChild(Object.assign(document.createElement("option"), { value: c, textContent: c }));
      input.addEventListener("change", () => send(s.name, input.value));
      row.appendChild(input);
      rows[s.name] = { row, input, set: (v) => { input.value = v; } };
    } else {
      const slider = Object.assign(document.createElement("input"), { type: "range", min: 0, max: STEPS, step: 1 });
      slider.className = "dal-slider"; slider.dataset.name = s.name;
      const box = Object.assign(document.createElement("input"), { type: "number", step: "any" });
      box.className = "dal-number"; box.dataset.name = s.name;
      const whole = s.kind === "whole";
      const toValue = (p) => { const v = s.min + (Number(p) / STEPS) * (s.max - s.min); return whole ? Math.round(v) : Number(v.toPrecision(4)); };
      const toPos = (v) => (typeof v !== "number" || !Number.isFinite(v)) ? 0
        : Math.round(Math.min(1, Math.max(0, (v - s.min) / (s.max - s.min))) * STEPS);
      slider.addEventListener("input", () => { box.value = fmt(toValue(slider.value)); });
      slider.addEventListener("change", () => send(s.name, toValue(slider.value)));
      dal.commitBox(box, () => {
        const v = box.value.trim() === "" ? null : Number(box.value);
        send(s.name, v === null || Number.isNaN(v) ? null : v);
      });
      row.append(slider, box, dal.make("span", "dal-unit", s.unit));
      input = box;
      rows[s.name] = { row, input: box, set: (v) => { slider.value = toPos(v); if (document.activeElement !== box) box.value = fmt(v); } };
    }
    grid.appendChild(row);
  }
  function drawInputs() {
    const invalid = model.get("invalid") || {};
    for (const [name, r] of Object.entries(rows)) {
      // a refused given: its row is marked and says why; the other givens keep applying
      const bad = Object.prototype.hasOwnProperty.call(invalid, name);
      r.row.classList.toggle("dal-invalid", bad);
      r.input.setAttribute("aria-invalid", bad ? "true" : "false");
      r.input.title = bad ? invalid[name] : "";
      r.set(model.get(name));
    }
  }
  function drawOutputs() {
    const d = model.get("decision") || {};
    head.textContent = d.directive ? `${d.directive} (gate ${d.gate})` : "";
    head.dataset.directive = d.directive || "";
    msg.textContent = model.get("error") || "";
    notice.textContent = model.get("notice") || "";
    readout.replaceChildren();
    for (const line of model.get("readout_lines") || []) readout.appendChild(dal.make("li", "", line));
    chart.innerHTML = model.get("chart_svg") || "";
    el.dataset.revision = String(model.get("revision") || 0);
  }
  dal.redrawOn(model, [...Object.keys(rows), "invalid"], drawInputs);
  dal.redrawOn(model, ["decision", "error", "notice", "readout_lines", "chart_svg", "revision"], drawOutputs);
  drawInputs(); drawOutputs();
}
export default { render };
