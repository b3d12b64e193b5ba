/* "Your photos" beside the finished mosaic's viewer: the library's thumbnails a page at a time
   (GET <job>/photos), each with how many cells it holds, searchable by name and sortable by use.
   Choosing a used photo outlines every cell it holds and steps the viewer through them (the
   "every place" machinery of which_photo.js); "Left out" lists the photos the mosaic did not
   use, each with the reason where it is known ("why isn't my photo in it?"). */
"use strict";

const PhotoPicker = (() => {
  function attach(places, statusUrl) {
    const root = document.getElementById("photo-picker");
    const list = document.getElementById("picker-photos");
    const counts = document.getElementById("picker-counts");
    const note = document.getElementById("picker-note");
    const pageText = document.getElementById("picker-page");
    const prev = document.getElementById("picker-prev");
    const next = document.getElementById("picker-next");
    const search = document.getElementById("picker-search");
    const sort = document.getElementById("picker-sort");
    const tabs = [...root.querySelectorAll("[data-show]")];
    const limit = window.matchMedia("(max-width: 640px)").matches ? 24 : 48;
    const state = { show: "all", sort: "name", search: "", offset: 0 };
    let asked = 0;
    let chosen = null;

    async function load() {
      const seq = ++asked;
      const query = new URLSearchParams({ show: state.show, sort: state.sort, offset: state.offset, limit });
      if (state.search) query.set("search", state.search);
      root.setAttribute("aria-busy", "true");
      try {
        const page = await PM.api(`${statusUrl}/photos?${query}`);
        if (seq === asked) render(page);
      } catch (error) {
        if (seq !== asked) return;
        list.replaceChildren();
        note.textContent = error.status === 404
          ? "This mosaic was made before tile maps were kept: its photos cannot be listed."
          : `Could not list the photos: ${error.message}`;
        note.hidden = false;
      } finally {
        if (seq === asked) root.removeAttribute("aria-busy");
      }
    }

    function render(page) {
      counts.textContent = `${PM.number(page.used)} of ${PM.number(page.photos_total)} used · ` +
        `${PM.number(page.left_out)} left out`;
      root.dataset.count = String(page.count);
      list.classList.toggle("reasons", state.show === "left_out");
      list.replaceChildren(...page.photos.map(item));
      if (!page.photos.length) {
        list.append(PM.el("li", { class: "hint picker-empty", text: state.search
          ? `No photo named like “${state.search}” here.` : "No photos here." }));
      }
      const first = page.count ? page.offset + 1 : 0;
      pageText.textContent = `${PM.number(first)}–${PM.number(page.offset + page.photos.length)} of ${PM.number(page.count)}`;
      prev.disabled = page.offset === 0;
      next.disabled = page.next_offset === null;
      note.hidden = !page.library_changed;
      if (page.library_changed) note.textContent = "The library has changed since this mosaic was made.";
    }

    /* One photo: its thumbnail and use count; in the left-out list, its name and reason beside. */
    function item(photo) {
      const thumb = photo.thumbnail_url
        ? PM.el("img", { src: photo.thumbnail_url, alt: "", loading: "lazy", width: "64", height: "64" })
        : PM.el("span", { class: "picker-nothumb", text: "?" });
      const uses = PM.el("span", { class: `picker-uses${photo.uses ? "" : " none"}`,
        text: photo.uses ? `×${PM.number(photo.uses)}` : "0" });
      const button = PM.el("button", {
        type: "button",
        class: "picker-photo",
        "data-name": photo.name,
        "data-uses": String(photo.uses),
        "aria-pressed": String(photo.name === chosen),
      }, thumb, uses);
      const told = `${photo.name}: ${photo.uses ? `in ${PM.number(photo.uses)} cell${photo.uses === 1 ? "" : "s"}` : photo.reason || "not used"}`;
      button.title = told;
      button.setAttribute("aria-label", told); // the thumbnail's alt is empty: the button says it
      const li = PM.el("li", {}, button);
      if (state.show === "left_out") {
        li.append(PM.el("div", { class: "picker-why" },
          PM.el("strong", { text: photo.name }),
          PM.el("span", { class: "hint picker-reason", text: photo.reason || "" })));
      }
      button.addEventListener("click", () => choose(photo, button));
      return li;
    }

    async function choose(photo, button) {
      chosen = photo.name;
      list.querySelectorAll(".picker-photo").forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
      if (!photo.uses) {
        places.clear();
        note.textContent = `${photo.name} is not in this mosaic: ${photo.reason || "not used"}.`;
        note.hidden = false;
        return;
      }
      note.hidden = true;
      try {
        await places.find(photo.name);
      } catch (error) {
        note.textContent = `Could not find it: ${error.message}`;
        note.hidden = false;
      }
    }

    tabs.forEach((tab) => tab.addEventListener("click", () => {
      tabs.forEach((t) => t.setAttribute("aria-pressed", String(t === tab)));
      Object.assign(state, { show: tab.dataset.show, offset: 0 });
      load();
    }));
    sort.addEventListener("change", () => {
      Object.assign(state, { sort: sort.value, offset: 0 });
      load();
    });
    let typed = 0;
    search.addEventListener("input", () => {
      const seq = ++typed;
      window.setTimeout(() => {
        if (seq !== typed) return; // still typing
        Object.assign(state, { search: search.value.trim(), offset: 0 });
        load();
      }, 250);
    });
    prev.addEventListener("click", () => { state.offset = Math.max(0, state.offset - limit); load(); });
    next.addEventListener("click", () => { state.offset += limit; load(); });
    root.hidden = false;
    load();
  }

  return { attach };
})();
