// Cadence explorer (widgets/cadence_explorer.py): a slider and a number box per given; the charts
// and the readout are what the kernel computed and drew. `dal` is widgets/static/_shared.js,
// bundled in front of this file.
function fmt(v) {
  if (v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v))) return "";
  return typeof v === "number" ? String(Number(v.toPrecision(6))) : String(v);
}
function render({ model, el }) {
  dal.isolateKeys(el, "dal-cadence");
  const grid = dal.make("div", "dal-controls");
  const msg = dal.make("div", "dal-error");
  const notice = dal.make("div", "dal-notice");
  const readout = dal.make("ul", "dal-readout");
  const chartA = dal.make("div", "dal-chart dal-chart-overhead");
  const chartB = dal.make("div", "dal-chart dal-chart-storage");
  el.append(grid, msg, notice, readout, chartA, chartB);
  const rows = {};
  const STEPS = 1000;
  for (const s of model.get("sliders")) {
    const row = dal.make("div", "dal-row"); row.dataset.name = s.name;
    const label = dal.make("label", "", `${s.label} (${s.name})`);
    const slider = Object.assign(document.createElement("input"), { type: "range", min: 0, max: STEPS, step: 1 });
    slider.className = "dal-slider"; slider.dataset.name = s.name;
    const box = Object.assign(document.createElement("input"), { type: "number", step: "any" });
    box.className = "dal-number"; box.dataset.name = s.name;
    const unit = dal.make("span", "dal-unit", s.unit);
    const src = dal.make("span", "dal-source");
    row.append(label, slider, box, unit, src); grid.appendChild(row);
    // slider position (0..STEPS) <-> the given, on the slider's log or linear scale
    const toValue = (p) => {
      const f = Number(p) / STEPS;
      let v = s.scale === "log" ? Math.pow(10, Math.log10(s.min) + f * (Math.log10(s.max) - Math.log10(s.min)))
                                : s.min + f * (s.max - s.min);
      return s.integer ? Math.round(v) : Number(v.toPrecision(4));
    };
    const toPos = (v) => {
      if (typeof v !== "number" || !Number.isFinite(v)) return 0;
      const f = s.scale === "log" ? (v <= 0 ? 0 : (Math.log10(v) - Math.log10(s.min)) / (Math.log10(s.max) - Math.log10(s.min)))
                                  : (v - s.min) / (s.max - s.min);
      return Math.round(Math.min(1, Math.max(0, f)) * STEPS);
    };
    const send = (v) => { model.set(s.name, v); model.save_changes(); };
    slider.addEventListener("input", () => { box.value = fmt(toValue(slider.value)); });
    slider.addEventListener("change", () => send(toValue(slider.value)));
    dal.commitBox(box, () => {
      const v = box.value.trim() === "" ? null : Number(box.value);
      send(v === null || Number.isNaN(v) ? null : v);
    });
    rows[s.name] = { row, slider, box, src, toPos };
  }
  function drawInputs() {
    const sources = model.get("sources") || {};
    const invalid = model.get("invalid") || {};
    for (const [name, r] of Object.entries(rows)) {
      // a refused given: its row is marked and says why; the other givens keep applying
      const bad = Object.prototype.hasOwnProperty.call(invalid, name);
      r.row.classList.toggle("dal-invalid", bad);
      r.box.setAttribute("aria-invalid", bad ? "true" : "false");
      r.box.title = bad ? invalid[name] : "";
      const v = model.get(name);
      r.slider.value = r.toPos(v);
      if (document.activeElement !== r.box) r.box.value = fmt(v);
      r.src.textContent = sources[name] === "measured" ? "measured" : "";
    }
  }
  function drawOutputs() {
    msg.textContent = model.get("error") || "";
    notice.textContent = model.get("notice") || "";
    readout.replaceChildren();
    for (const line of model.get("readout_lines") || []) readout.appendChild(dal.make("li", "", line));
    chartA.innerHTML = model.get("overhead_svg") || "";
    chartB.innerHTML = model.get("storage_svg") || "";
    el.dataset.revision = String(model.get("revision") || 0);
  }
  dal.redrawOn(model, [...Object.keys(rows), "sources", "invalid"], drawInputs);
  dal.redrawOn(model, ["error", "notice", "readout_lines", "overhead_svg", "storage_svg", "revision"], drawOutputs);
  drawInputs(); drawOutputs();
}
export default { render };
