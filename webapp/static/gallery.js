/* The job history: this browser's mosaics, newest first, paged with the continuation token. */
"use strict";

(() => {
  const gallery = document.getElementById("gallery");
  const more = document.getElementById("more");
  const empty = document.getElementById("gallery-empty");
  let token = null;

  function card(job) {
    const cancelled = PM.cancelled(job);
    const badge = PM.el("span", { class: "badge", "data-status": job.status,
      text: job.waiting_for_storage ? "waiting for storage" : cancelled ? "cancelled" : job.status });
    const actions = PM.el("div", { class: "actions" });
    if (job.result_url) {
      actions.append(PM.el("a", { class: "button", href: `${job.result_url}?download=1`, download: "", text: "Download" }));
    }
    if (job.status !== "done" && job.status !== "failed" && !job.waiting_for_storage) {
      const stop = PM.el("button", { type: "button", class: "button danger", text: "Cancel" });
      stop.addEventListener("click", async () => {
        if (!window.confirm("Stop making this mosaic?")) return;
        try {
          node.replaceWith(card(await PM.api(`${job.status_url}/cancel`, { method: "POST" })));
        } catch (error) {
          window.alert(error.message);
        }
      });
      actions.append(stop);
    }
    if (job.status === "done" || job.status === "failed") {
      const remove = PM.el("button", { type: "button", class: "button danger", text: "Delete" });
      remove.addEventListener("click", async () => {
        if (!window.confirm("Delete this mosaic and its files?")) return;
        try {
          await PM.api(job.status_url, { method: "DELETE" });
          node.remove();
          if (!gallery.children.length) empty.hidden = false;
        } catch (error) {
          window.alert(error.message);
        }
      });
      actions.append(remove);
    }
    const progress = job.status === "done" ? PM.size(job.output_width, job.output_height) : `${Math.round(job.progress * 100)} % of ${job.slices} slices`;
    const node = PM.el("article", { class: "tile-card", "data-request-id": job.request_id },
      PM.el("a", { class: "thumb", href: job.page_url }, PM.el("img", { src: job.preview_url, alt: "Mosaic preview", loading: "lazy" })),
      PM.el("div", { class: "meta" },
        PM.el("div", { class: "row" }, PM.el("strong", { text: PM.when(job.created_at) }), badge),
        PM.el("div", { class: "row muted" }, PM.el("span", { text: progress }), PM.el("span", { text: `${job.tile_size} px · ${job.library}` }))),
      actions);
    return node;
  }

  async function load() {
    more.disabled = true;
    try {
      const params = new URLSearchParams({ limit: "24" });
      if (token) params.set("continuation", token);
      const page = await PM.api(`/api/jobs?${params}`);
      page.jobs.forEach((job) => gallery.append(card(job)));
      token = page.continuation;
      more.hidden = !token;
      empty.hidden = gallery.children.length > 0;
    } catch (error) {
      gallery.append(PM.el("p", { class: "error", text: error.message }));
    } finally {
      more.disabled = false;
    }
  }

  more.addEventListener("click", load);
  load();
})();
