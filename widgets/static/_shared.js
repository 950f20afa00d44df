// Helpers every course widget shares (widgets/_base.py puts this file in front of each widget's own
// file, so the two form one ES module: the widget reaches the helpers through `dal`).
//
// Nothing here computes a figure the reader sees: the kernel publishes every value as a trait and
// these functions only lay it out, send the reader's input back, and keep the keyboard inside.
const dal = Object.freeze({
  // Keys typed inside the widget (arrows on a slider, digits in a box, letters in a select) belong
  // to the widget. JupyterLab's notebook shortcuts must not see them: in command mode they select
  // another cell, collapse a heading, or ("0", "0") restart the kernel.
  isolateKeys(el, className) {
    if (className) el.classList.add(className);
    el.dataset.lmSuppressShortcuts = "true";
    el.addEventListener("keydown", (e) => e.stopPropagation());
    return el;
  },

  // An element with a class and a text (both optional).
  make(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  },

  // A value as box or cell text: "" for null, undefined, NaN and infinities.
  text(v) {
    if (v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v))) return "";
    return String(v);
  },

  // A number box that commits on change and on Enter. With `typing` (a Set), the box is marked
  // while the reader types in it, so a redraw can leave half-typed digits alone (see `typedIn`).
  commitBox(box, commit, typing) {
    if (typing) box.addEventListener("input", () => typing.add(box));
    const done = () => { if (typing) typing.delete(box); commit(); };
    box.addEventListener("change", done);
    box.addEventListener("keydown", (e) => {
      e.stopPropagation();
      if (e.key === "Enter") { e.preventDefault(); done(); }
    });
    return box;
  },

  // Is the reader typing in `box` right now (focused and changed since its last commit)?
  typedIn(box, typing) {
    return document.activeElement === box && typing.has(box);
  },

  // Fill `table` from rows of plain data: one header row, then one row per item.
  //   columns: keys, or {key, label} objects when the header differs from the key;
  //   options.rowClass(row) -> class of the <tr>; options.rowData(row) -> its data-* attributes;
  //   options.cell(td, row, key) fills a cell itself (default: the value's text).
  fillTable(table, columns, rows, options = {}) {
    const cols = columns.map((c) => (typeof c === "string" ? { key: c, label: c } : c));
    table.replaceChildren();
    const head = table.insertRow();
    for (const c of cols) head.appendChild(dal.make("th", "", c.label));
    for (const r of rows || []) {
      const tr = table.insertRow();
      if (options.rowClass) tr.className = options.rowClass(r) || "";
      if (options.rowData) Object.assign(tr.dataset, options.rowData(r));
      for (const c of cols) {
        const td = tr.insertCell();
        if (options.cell) options.cell(td, r, c.key);
        else td.textContent = dal.text(r[c.key]);
      }
    }
    return table;
  },

  // Call `draw` whenever one of the traits `names` changes.
  redrawOn(model, names, draw) {
    for (const t of names) model.on(`change:${t}`, draw);
  },

  // --- the command protocol (Python side: widgets._base.CommandWidget) ---------------------------
  // A click writes {action, ...extra(), n, view} to the `command` trait. `n` is one more than the
  // larger of this view's last `n` and the kernel's `completed`, so every click is a change of the
  // trait, also after a re-render or from a second view of the same model. The kernel runs the
  // action with `busy` set and then sets `completed` to that `n`.
  commander(model, extra) {
    const view = Math.random().toString(36).slice(2);
    let n = 0;
    return (action) => {
      n = Math.max(n, model.get("completed") || 0) + 1;
      model.set("command", { action, ...(extra ? extra() : {}), n, view });
      model.save_changes();
    };
  },

  // A button that sends `action` through `send` (a `commander`).
  button(label, action, send, title) {
    const b = dal.make("button", "dal-btn", label);
    b.dataset.action = action;
    if (title) b.title = title;
    b.addEventListener("click", () => send(action));
    return b;
  },

  // Draw the protocol's state: `data-completed` on the widget (what a caller waiting for a command
  // watches), the buttons disabled while the kernel works, the status line prefixed "working…".
  // Returns whether the kernel is busy.
  showBusy(el, model, buttons, status) {
    const busy = !!model.get("busy");
    el.dataset.completed = String(model.get("completed") || 0);
    for (const b of buttons) b.disabled = busy;
    if (status) status.textContent = (busy ? "working… " : "") + (model.get("status") || "");
    return busy;
  },

  // The traits a command widget redraws on, besides its own.
  COMMAND_TRAITS: Object.freeze(["status", "error", "busy", "completed"]),
});
