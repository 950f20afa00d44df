// Retention planner (widgets/retention_planner.py): the givens and the custom policy's lifetimes as
// inputs; the bar chart, readout, cost and promise tables as the kernel computed them. `dal` is
// widgets/static/_shared.js, bundled in front of this file.
function render({ model, el }) {
  dal.isolateKeys(el, "dal-retention");
  const make = dal.make;
  const presetRow = make("div", "dal-row");
  const presetSel = make("select", "dal-preset");
  for (const p of model.get("presets_spec")) {
    const o = make("option", "", p.label); o.value = p.name; presetSel.appendChild(o);
  }
  presetRow.append(make("label", "", "preset"), presetSel);
  const grid = make("div", "dal-controls");
  const lifeHead = make("div", "dal-subhead", "custom policy: lifetime of each class after the run (months)");
  const lifeGrid = make("div", "dal-lifetimes");
  const msg = make("div", "dal-error");
  const notice = make("div", "dal-notice");
  const readout = make("ul", "dal-readout");
  const chart = make("div", "dal-chart");
  const costs = make("table", "dal-costs");
  const proms = make("table", "dal-promises");
  el.append(presetRow, grid, lifeHead, lifeGrid, msg, notice, readout, chart, costs, proms);
  const send = (name, v) => { model.set(name, v); model.save_changes(); };
  presetSel.addEventListener("change", () => send("preset", presetSel.value));

  const boxes = {};
  const typing = new Set();   // boxes typed in since their last commit: a redraw must not overwrite them
  const srcs = {};
  for (const g of model.get("givens_spec")) {
    const row = make("div", "dal-row"); row.dataset.name = g.name;
    const label = make("label", "", `${g.label} (${g.name})`);
    const box = Object.assign(document.createElement("input"), { type: "number", step: g.whole ? "1" : "any" });
    box.className = "dal-number"; box.dataset.name = g.name;
    const unit = make("span", "dal-unit", g.unit);
    const src = make("span", "dal-source");
    row.append(label, box, unit, src); grid.appendChild(row);
    dal.commitBox(box, () => {
      const t = box.value.trim();
      const v = t === "" ? NaN : Number(t);
      send(g.name, Number.isNaN(v) ? null : v);
    }, typing);
    boxes[g.name] = box; srcs[g.name] = src;
  }

  const life = {};
  for (const c of model.get("classes_spec")) {
    const row = make("div", "dal-row"); row.dataset.artifact = c.name;
    const box = Object.assign(document.createElement("input"), { type: "number", step: "any", min: "0" });
    box.className = "dal-life"; box.dataset.artifact = c.name;
    const kept = Object.assign(document.createElement("input"), { type: "checkbox" });
    kept.className = "dal-kept"; kept.dataset.artifact = c.name;
    const keptLabel = make("label", "dal-kept-label"); keptLabel.append(kept, " kept");
    row.append(make("label", "", c.label), box, make("span", "dal-unit", "months"), keptLabel);
    lifeGrid.appendChild(row);
    const commit = () => {
      typing.delete(box);
      const cur = Object.assign({}, model.get("custom_lifetimes") || {});
      if (!kept.checked) { cur[c.name] = null; }
      else {
        const t = box.value.trim();
        const v = t === "" ? NaN : Number(t);
        cur[c.name] = Number.isNaN(v) ? "" : v;     // "" is refused by the kernel with a message
      }
      send("custom_lifetimes", cur);
    };
    dal.commitBox(box, commit, typing);
    kept.addEventListener("change", () => {
      if (kept.checked && box.value.trim() === "") box.value = dal.text(model.get("replay_months"));
      commit();
    });
    life[c.name] = { box, kept };
  }

  function drawInputs() {
    presetSel.value = model.get("preset");
    const sources = model.get("sources") || {};
    for (const [name, box] of Object.entries(boxes)) {
      if (!dal.typedIn(box, typing)) box.value = dal.text(model.get(name));
      srcs[name].textContent = sources[name] || "";
    }
    const cur = model.get("custom_lifetimes") || {};
    for (const [name, r] of Object.entries(life)) {
      const v = cur[name];
      const isKept = v !== null && v !== undefined;
      r.kept.checked = isKept;
      r.box.disabled = !isKept;
      if (!dal.typedIn(r.box, typing)) r.box.value = isKept ? dal.text(v) : "";
    }
  }
  function drawTables() {
    const byPolicy = (r) => ({ policy: r.policy });
    dal.fillTable(costs, model.get("cost_columns") || [], model.get("cost_cells") || [], {
      rowData: byPolicy,
      cell: (td, r, key) => { td.dataset.col = key; td.textContent = dal.text(r[key]); },
    });
    const names = model.get("promise_names") || [];
    const labels = model.get("promise_labels") || {};
    const promCols = ["policy", ...names.map((n) => ({ key: n, label: labels[n] || n }))];
    dal.fillTable(proms, promCols, model.get("promise_cells") || [], {
      rowData: byPolicy,
      cell: (td, r, key) => {
        if (key === "policy") { td.textContent = r.policy; return; }
        td.dataset.promise = key;
        td.className = r[key].kept ? "dal-kept-cell" : "dal-broken-cell";
        td.textContent = r[key].text;
      },
    });
  }
  function drawOutputs() {
    drawInputs();
    msg.textContent = model.get("error") || "";
    notice.textContent = model.get("notice") || "";
    readout.replaceChildren();
    for (const line of model.get("readout_lines") || []) readout.appendChild(make("li", "", line));
    chart.innerHTML = model.get("chart_svg") || "";
    drawTables();
    el.dataset.revision = String(model.get("revision") || 0);
  }
  dal.redrawOn(model, model.get("givens_spec").map((g) => g.name), drawInputs);
  dal.redrawOn(model, ["preset", "custom_lifetimes", "sources"], drawInputs);
  dal.redrawOn(model, ["error", "notice", "readout_lines", "chart_svg", "cost_cells", "promise_cells", "revision"],
               drawOutputs);
  drawOutputs();
}
export default { render };
