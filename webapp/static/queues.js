/* The queue monitor: depths of the four work queues and their poison queues, every 2 s. */
"use strict";

(() => {
  const body = document.getElementById("queues");
  const updated = document.getElementById("queues-updated");
  const health = document.getElementById("health");

  async function tick() {
    try {
      const { queues } = await PM.api("/api/queues");
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
  setInterval(tick, 2000);
  setInterval(checkHealth, 15000);
})();
