/* The queue monitor: depths of the work queues and their poison queues, and the estimated wait, every 2 s. */
"use strict";

(() => {
  const body = document.getElementById("queues");
  const updated = document.getElementById("queues-updated");
  const health = document.getElementById("health");
  const wait = document.getElementById("estimated-wait");

  /** The backlog reading backpressure decides on (dal/admission/backpressure.py), in words. */
  function describeWait(backlog) {
    if (!backlog.waiting_slices) return "no wait: nothing is queued";
    if (backlog.estimated_wait_seconds === null) return `${PM.number(backlog.waiting_slices)} slices waiting; render rate not measured yet`;
    const text = `about ${PM.number(Math.round(backlog.estimated_wait_seconds))} s for ${PM.number(backlog.waiting_slices)} waiting slices ` +
      `(${backlog.processors} processor(s), ${backlog.slices_per_second} slices/s)`;
    return backlog.busy ? `${text}: busy, new jobs are asked to come back later` : text;
  }

  async function tick() {
    try {
      const { queues, backlog } = await PM.api("/api/queues");
      wait.textContent = describeWait(backlog);
      wait.dataset.busy = backlog.busy ? "true" : "false";
      const peak = Math.max(10, ...queues.map((q) => q.depth));
      body.replaceChildren(...queues.map((q) => {
        const fill = PM.el("div", { class: "fill" });
        fill.style.width = `${(100 * q.depth) / peak}%`;
        return PM.el("tr", { "data-queue": q.name },
          PM.el("td", {}, PM.el("strong", { text: q.name })),
          PM.el("td", {}, PM.el("div", { class: "meter" }, PM.el("div", { class: "track" }, fill), PM.el("b", { text: PM.number(q.depth) }))),
          PM.el("td", { class: q.poison_depth ? "poison-some" : "poison-zero", text: PM.number(q.poison_depth) }));
      }));
      updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    } catch (error) {
      updated.textContent = `Not updated: ${error.message}`;
    }
  }

  async function checkHealth() {
    try {
      await PM.api("/healthz");
      health.textContent = "reachable ✓";
    } catch (error) {
      health.textContent = `unreachable: ${error.message}`;
    }
  }

  tick();
  checkHealth();
  document.addEventListener("queues-changed", tick); // an operator action: show the new depths now
  setInterval(tick, 2000);
  setInterval(checkHealth, 15000);
})();

/* Operator actions on poison queues; present only when the server has an operator token. */
(() => {
  const section = document.getElementById("poison-ops");
  if (!section) return;
  const form = document.getElementById("admin-token-form");
  const input = document.getElementById("admin-token");
  const status = document.getElementById("poison-status");
  const lists = document.getElementById("poison-lists");
  const KEY = "pm-admin-token";

  const auth = () => ({ Authorization: `Bearer ${sessionStorage.getItem(KEY) || ""}` });

  async function act(queue, action, body) {
    try {
      const result = await PM.api(`/api/queues/${queue}/poison/${action}`, {
        method: "POST", headers: Object.assign({ "Content-Type": "application/json" }, auth()), body: JSON.stringify(body),
      });
      const left = Object.keys(result.skipped || {}).length;
      status.textContent = `${action === "requeue" ? "Requeued" : "Purged"} ${PM.number(result.count)} message(s) of ${queue}` +
        (left ? `; ${left} left in poison (not a ${queue} message)` : "") + ".";
    } catch (error) {
      status.textContent = `Not done: ${error.message}`;
    }
    document.dispatchEvent(new Event("queues-changed"));
    refresh();
  }

  function button(text, onClick, extra = "") {
    const b = PM.el("button", { type: "button", class: `button ${extra}`.trim(), text });
    b.addEventListener("click", onClick);
    return b;
  }

  async function refresh() {
    if (!sessionStorage.getItem(KEY)) {
      lists.replaceChildren();
      return;
    }
    try {
      const { queues } = await PM.api("/api/queues");
      const blocks = [];
      for (const q of queues.filter((q) => q.poison_depth > 0)) {
        const { messages } = await PM.api(`/api/queues/${q.name}/poison`, { headers: auth() });
        const rows = messages.map((m) => PM.el("tr", { "data-id": m.id },
          PM.el("td", { text: PM.when(m.moved_at) }),
          PM.el("td", { text: String(m.dequeue_count) }),
          PM.el("td", { text: m.reason }),
          PM.el("td", {}, button("Requeue", () => act(q.name, "requeue", { id: m.id }), "requeue-one"))));
        blocks.push(PM.el("div", { class: "poison-queue", "data-queue": q.name },
          PM.el("h3", { text: `${q.name}-poison (${PM.number(q.poison_depth)})` }),
          button("Requeue all", () => act(q.name, "requeue", { all: true }), "requeue-all"),
          button("Purge all", () => { if (confirm(`Delete every poison message of ${q.name}?`)) act(q.name, "purge", { all: true }); }, "purge-all danger"),
          PM.el("table", { class: "table" },
            PM.el("thead", {}, PM.el("tr", {}, ...["Moved", "Deliveries", "Reason", ""].map((h) => PM.el("th", { text: h })))),
            PM.el("tbody", {}, ...rows))));
      }
      lists.replaceChildren(...blocks);
      if (!blocks.length) status.textContent = `${status.textContent} No poison messages.`.trim();
    } catch (error) {
      status.textContent = error.status === 401 || error.status === 403 ? "The operator token was refused." : `Not loaded: ${error.message}`;
    }
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, input.value);
    input.value = "";
    status.textContent = ""; // a new token: forget what the last one was told
    refresh();
  });
  refresh();
  setInterval(refresh, 10000);
})();
