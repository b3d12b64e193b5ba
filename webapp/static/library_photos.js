/* A library's photos, live: uploaded / indexed / skipped-with-why counts polled from
 * GET /api/libraries/<name>/photos while the indexer works (every 1.5 s, slowing to 6 s while
 * nothing changes, stopping when nothing is pending), the near-duplicate groups, and the photos
 * a page at a time with their thumbnail, state and skip reason. For the owner, a checkbox per
 * photo, removal and renaming (PMLibraryEdit). */
"use strict";

const PMLibraryPhotos = (() => {
  const settings = { pageSize: 24, fastMs: 1500, slowMs: 6000 };

  function panel(library, edit) {
    const id = `photos-${library}`;
    const bar = PM.el("div", { class: "bar" });
    const meter = PM.el("div", {
      class: "progress", role: "progressbar", "aria-label": `Indexing of ${library}`,
      "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": "0",
    }, bar);
    const status = PM.el("p", { class: "progress-text", role: "status", "aria-live": "polite", text: "Reading the library…" });
    const reasons = PM.el("ul", { class: "skip-reasons" });
    const groups = PM.el("div", { class: "photo-groups", hidden: "" });
    const grid = PM.el("ul", { class: "photo-grid", "aria-label": `Photos of ${library}` });
    const back = PM.el("button", { type: "button", class: "button", text: "‹ Previous" });
    const next = PM.el("button", { type: "button", class: "button", text: "Next ›" });
    const where = PM.el("span", { class: "hint" });
    const pager = PM.el("nav", { class: "pager", "aria-label": "Photo pages" }, back, where, next);
    const root = PM.el("section", { class: "card library-photos", id, "data-library": library, "aria-labelledby": `${id}-h` },
      PM.el("h2", { id: `${id}-h`, text: `Photos of ${library}` }), edit && edit.rename, meter, status, reasons, groups,
      edit && edit.selection.tools, edit && edit.selection.status, grid, pager);
    return { root, bar, meter, status, reasons, groups, grid, pager, back, next, where };
  }

  function countsText(p) {
    const parts = [`${PM.number(p.uploaded)} uploaded`, `${PM.number(p.indexed)} indexed`, `${PM.number(p.skipped)} skipped`];
    if (p.groups) parts.push(`${PM.number(p.groups)} group${p.groups === 1 ? "" : "s"} of near-duplicates`);
    const state = p.pending ? `indexing… ${PM.number(p.pending)} to go` : "ready";
    return `${parts.join(" · ")} — ${state}`;
  }

  function photoItem(photo, selection) {
    const label = photo.state === "skipped" ? `skipped: ${photo.reason}` : photo.state;
    const picture = photo.tile_url
      ? PM.el("img", { src: photo.tile_url, alt: "", loading: "lazy", width: "64", height: "64" })
      : PM.el("span", { class: "photo-none", "aria-hidden": "true", text: photo.state === "skipped" ? "✕" : "…" });
    return PM.el("li", { class: `photo ${photo.state}`, "data-name": photo.name, "data-state": photo.state },
      selection && selection.checkbox(photo.name), picture,
      PM.el("span", { class: "photo-name", text: photo.name }),
      PM.el("small", { class: "photo-state", text: photo.group !== null ? `${label} · group ${photo.group + 1}` : label }));
  }

  /**
   * Show `library`'s photos in `host` (replacing what was there); returns {refresh, stop}.
   * `manage` ({onRenamed(name), onRemoved(names)}): the owner's controls to rename and remove.
   */
  function show(host, library, { onReady = () => {}, manage = null } = {}) {
    let view = null;
    const edit = manage && {
      rename: PMLibraryEdit.renamer(library, manage.onRenamed),
      selection: PMLibraryEdit.selection(library, (names) => {
        view.refresh();
        manage.onRemoved(names);
      }),
    };
    const selection = edit && edit.selection;
    const ui = panel(library, edit);
    host.replaceChildren(ui.root);
    const base = `/api/libraries/${encodeURIComponent(library)}/photos?limit=${settings.pageSize}`;
    const markers = [null]; // the continuation of each page seen: Previous goes back one
    let page = 0;
    let timer = null;
    let last = "";
    let stopped = false;
    let readied = false;

    function render(body) {
      const p = body.progress;
      const handled = p.uploaded - p.pending;
      const pct = p.uploaded ? Math.round((100 * handled) / p.uploaded) : 0;
      ui.bar.style.width = `${pct}%`;
      ui.meter.setAttribute("aria-valuenow", String(pct));
      ui.meter.setAttribute("aria-valuetext", `${PM.number(handled)} of ${PM.number(p.uploaded)} photos handled`);
      ui.status.textContent = countsText(p);
      ui.root.dataset.pending = String(p.pending);
      ui.reasons.replaceChildren(...Object.entries(p.skipped_reasons).map(([why, n]) =>
        PM.el("li", { text: `${PM.number(n)} skipped: ${why}` })));
      ui.groups.hidden = !body.groups.length;
      ui.groups.replaceChildren(PM.el("h3", { text: "Near-duplicates (each group counts as one photo)" }),
        ...body.groups.map((names, i) => PM.el("p", { class: "photo-group", text: `Group ${i + 1}: ${names.join(", ")}` })));
      if (selection) selection.page();
      ui.grid.replaceChildren(...body.photos.map((photo) => photoItem(photo, selection)));
      if (selection) selection.update();
      markers[page + 1] = body.continuation;
      ui.back.disabled = page === 0;
      ui.next.disabled = !body.continuation;
      ui.where.textContent = `page ${page + 1}`;
      ui.pager.hidden = page === 0 && !body.continuation; // one page: nothing to turn
      return p;
    }

    async function refresh() {
      clearTimeout(timer);
      let wait = settings.slowMs;
      try {
        const marker = markers[page];
        const body = await PM.api(marker ? `${base}&continuation=${encodeURIComponent(marker)}` : base);
        if (!body.photos.length && page > 0) { // its last photos were removed: the page before
          page -= 1;
          return refresh();
        }
        const p = render(body);
        const now = JSON.stringify(p);
        wait = now === last ? settings.slowMs : settings.fastMs; // gentle while the indexer is quiet
        last = now;
        if (!p.pending) { // ready: nothing will change until more photos come
          if (!readied) onReady();
          readied = true;
          return;
        }
      } catch (error) {
        ui.status.textContent = `Could not read the progress: ${error.message} Trying again…`;
      }
      if (!stopped) timer = setTimeout(refresh, wait);
    }

    ui.next.addEventListener("click", () => { page += 1; refresh(); });
    ui.back.addEventListener("click", () => { page = Math.max(0, page - 1); refresh(); });
    refresh();
    view = { refresh, stop: () => { stopped = true; clearTimeout(timer); }, root: ui.root };
    return view;
  }

  return { settings, show };
})();
