// Replication panel (widgets/replication.py): start, break and heal an etcd cluster, appending to a
// quorum-acknowledged log. `dal` is widgets/static/_shared.js, bundled in front of this file.
function render({ model, el }) {
  dal.isolateKeys(el, "dal-replication");
  const bar = dal.make("div", "dal-bar");
  const sel = dal.make("select", "dal-member");
  const send = dal.commander(model, () => ({ member: sel.value }));
  const mk = (label, action, title) => dal.button(label, action, send, title);
  sel.addEventListener("change", () => { model.set("member", sel.value); model.save_changes(); });
  bar.append(mk("start cluster", "start", "start three etcd members on loopback"),
             mk("append", "append", "append one event through the quorum store"),
             document.createTextNode(" member "), sel,
             mk("kill", "kill", "SIGKILL: a crashed node, its disk kept"),
             mk("pause (partition)", "pause", "SIGSTOP: alive but silent, as behind a partition"),
             mk("resume", "resume", "SIGCONT a paused member"),
             mk("restart", "restart", "start a killed member again on its own data"),
             mk("destroy volume", "destroy_volume", "SIGKILL and delete its data directory"),
             mk("stop", "stop", "stop every member by pid"));
  const status = dal.make("div", "dal-status");
  const msg = dal.make("div", "dal-error");
  const members = dal.make("table", "dal-members");
  const head = dal.make("div", "dal-head");
  const counts = dal.make("div", "dal-counts");
  const check = dal.make("div", "dal-check");
  const outcomes = dal.make("ul", "dal-outcomes");
  el.append(bar, status, msg, members, head, counts, check, outcomes);
  function draw() {
    dal.showBusy(el, model, bar.querySelectorAll("button"), status);
    const rows = model.get("members") || [];
    const names = rows.map((r) => r.member);
    if (sel.options.length !== names.length || names.some((x, i) => sel.options[i].value !== x)) {
      sel.replaceChildren();
      for (const x of names) { const o = dal.make("option", "", x); o.value = x; sel.appendChild(o); }
    }
    if (names.includes(model.get("member"))) sel.value = model.get("member");
    msg.textContent = model.get("error") || "";
    dal.fillTable(members, ["member", "state", "pid", "leader"], rows, {
      rowClass: (r) => "dal-state-" + r.state,
      rowData: (r) => ({ member: r.member }),
      cell: (td, r, key) => { td.textContent = key === "leader" ? (r.leader ? "★ leader" : "") : dal.text(r[key]); },
    });
    const tail = model.get("log_tail") || [];
    head.textContent = "log head (acknowledged to this writer): #" + (model.get("head") || 0) +
      (tail.length ? "  ·  last: " + tail.map((e) => `#${e.sequence} ${e.type}${e.operation_id ? " " + e.operation_id : ""}`).join(", ") : "");
    const c = model.get("counts") || {};
    counts.textContent = `appends acknowledged: ${c.acknowledged || 0} · not acknowledged: ${c.unacknowledged || 0}` +
      ` · in doubt now: ${c.in_doubt || 0} · in-doubt writes resolved later: ${c.resolved_later || 0}`;
    check.textContent = model.get("check") || "";
    check.className = "dal-check" + (/missing|out of order/.test(check.textContent) ? " dal-bad" : "");
    outcomes.replaceChildren();
    for (const o of model.get("outcomes") || []) outcomes.appendChild(dal.make("li", "dal-" + o.kind, o.text));
  }
  dal.redrawOn(model, [...dal.COMMAND_TRAITS, "members", "member", "head", "log_tail", "counts", "check", "outcomes"],
               draw);
  draw();
}
export default { render };
