/* The libraries page: this browser's and the shared libraries with sample tiles; a form that
 * uploads photos or a folder straight to storage (PMUploads) into a new library or, from a
 * card's "Add photos", into one of this browser's; the chosen library's photos live (PMLibraryPhotos). */
"use strict";

(() => {
  const list = document.getElementById("libraries");
  const form = document.getElementById("library-form");
  const nameInput = document.getElementById("lib-name");
  const files = document.getElementById("lib-files");
  const folder = document.getElementById("lib-folder");
  const drop = document.getElementById("lib-drop");
  const chosen = document.getElementById("lib-chosen");
  const errorBox = document.getElementById("lib-error");
  const submit = document.getElementById("lib-submit");
  const cancelAdd = document.getElementById("lib-cancel-add");
  const title = document.getElementById("lib-form-title");
  const progressBox = document.getElementById("upload-progress");
  const bar = document.getElementById("upload-bar");
  const statusLine = document.getElementById("upload-status");
  const fileList = document.getElementById("upload-files");
  const photosHost = document.getElementById("library-photos");
  let picked = { photos: [], leftOut: [] };
  let addingTo = null; // a library of this browser's, when its card's "Add photos" was clicked
  let live = null;

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
  }

  /** `library`'s photos in the panel; this browser owns it, so with renaming and removal. */
  function showPhotos(library, onReady) {
    if (live) live.stop();
    const manage = {
      onRenamed(name) {
        if (addingTo === library) setMode(name, { focus: false });
        showPhotos(name);
        load();
      },
      onRemoved: () => load(), // the cards' tile counts
    };
    live = PMLibraryPhotos.show(photosHost, library, { onReady, manage });
  }

  async function load() {
    try {
      const libraries = await PM.libraries();
      const cards = await Promise.all(libraries.map(async (lib) => {
        const detail = await PM.api(`${lib.url}?samples=24`);
        const card = PM.el("article", { class: "card", "data-library": lib.name },
          PM.el("h2", {}, PM.el("span", { text: lib.name }), PM.el("small", { text: lib.tile_count >= 0 ? `${PM.number(lib.tile_count)} tile${lib.tile_count === 1 ? "" : "s"}` : "" })),
          PM.el("p", { text: lib.description + (lib.shared ? " (shared)" : "") }),
          PM.repeatHint(lib.variety),
          PM.el("div", { class: "samples" }, ...detail.samples.map((src) => PM.el("img", { src, alt: "" }))));
        const actions = PM.el("div", { class: "card-actions" });
        if (lib.owned && lib.uploads) actions.append(addButton(lib), photosButton(lib));
        if (lib.owned) actions.append(deleteButton(lib));
        if (actions.childElementCount) card.append(actions);
        return card;
      }));
      list.replaceChildren(...cards);
      if (!cards.length) list.append(PM.el("p", { class: "empty", text: "No libraries yet." }));
    } catch (error) {
      list.replaceChildren(PM.el("p", { class: "error", text: error.message }));
    }
  }

  function addButton(lib) {
    const button = PM.el("button", { type: "button", class: "button add-photos", text: "Add photos", "aria-controls": "library-form" });
    button.addEventListener("click", () => setMode(lib.name));
    return button;
  }

  function photosButton(lib) {
    const button = PM.el("button", { type: "button", class: "button show-photos", text: "Photos", "aria-controls": "library-photos" });
    button.addEventListener("click", () => {
      showPhotos(lib.name);
      photosHost.scrollIntoView({ behavior: "smooth", block: "start" });
    });
    return button;
  }

  // Only the owner sees the button (the API refuses anyone else too).
  function deleteButton(lib) {
    const button = PM.el("button", { type: "button", class: "button danger", text: "Delete library" });
    button.addEventListener("click", async () => {
      if (!window.confirm(`Delete the library “${lib.name}” and its ${PM.number(lib.tile_count)} tiles?`)) return;
      button.disabled = true;
      try {
        await PM.api(lib.url, { method: "DELETE" });
        load();
      } catch (error) {
        showError(error.message);
        button.disabled = false;
      }
    });
    return button;
  }

  /** The form makes a new library (null) or adds photos to `library`. */
  function setMode(library, { focus = true } = {}) {
    addingTo = library;
    nameInput.value = library || "";
    nameInput.readOnly = Boolean(library);
    document.getElementById("lib-description-field").hidden = Boolean(library);
    title.textContent = library ? `Add photos to ${library}` : "Make a library from your photos";
    submit.textContent = library ? `Upload into ${library}` : "Upload and create library";
    cancelAdd.hidden = !library;
    if (library && focus) {
      document.getElementById("library-form-card").scrollIntoView({ behavior: "smooth", block: "start" });
      files.focus();
    }
  }
  cancelAdd.addEventListener("click", () => setMode(null));

  function choose(items) {
    picked = PMUploads.sort(items);
    const total = picked.photos.reduce((sum, p) => sum + p.file.size, 0);
    const count = picked.photos.length;
    const head = count ? `${PM.number(count)} photo${count === 1 ? "" : "s"} · ${PM.bytes(total)}.` : "No photos chosen.";
    chosen.textContent = [head, PMUploads.leftOutNote(picked.leftOut)].filter(Boolean).join(" ");
  }
  files.addEventListener("change", () => choose(PMUploads.chosen(files.files)));
  folder.addEventListener("change", () => choose(PMUploads.chosen(folder.files)));
  ["dragenter", "dragover"].forEach((type) => drop.addEventListener(type, (e) => { e.preventDefault(); drop.classList.add("drag"); }));
  ["dragleave", "drop"].forEach((type) => drop.addEventListener(type, () => drop.classList.remove("drag")));
  drop.addEventListener("drop", async (e) => {
    e.preventDefault();
    if (!e.dataTransfer) return;
    try {
      choose(await PMUploads.dropped(e.dataTransfer));
    } catch (error) {
      showError(`Could not read what was dropped: ${error.message}`);
    }
  });

  // One row per file, following it: queued, its bytes while uploading, then its end.
  const rows = new Map();
  const fileHooks = {
    file(name, state, sent, size, reason) {
      let row = rows.get(name);
      if (!row) {
        row = PM.el("li", { "data-name": name }, PM.el("span", { class: "upload-name", text: name }), PM.el("small"));
        rows.set(name, row);
        fileList.append(row);
      }
      row.dataset.state = state;
      const pct = size ? Math.round((100 * sent) / size) : 0;
      row.lastChild.textContent = {
        queued: "waiting", uploading: `${pct} % of ${PM.bytes(size)}`, uploaded: "uploaded",
        skipped: "already uploaded", refused: `refused: ${reason}`, failed: `failed: ${reason}`,
      }[state];
    },
    total(sent, bytes) {
      const pct = bytes ? Math.min(100, Math.round((100 * sent) / bytes)) : 100;
      bar.firstElementChild.style.width = `${pct}%`;
      bar.setAttribute("aria-valuenow", String(pct));
      statusLine.textContent = `Uploading… ${pct} % of ${PM.bytes(bytes)}`;
    },
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showError("");
    const library = nameInput.value.trim();
    if (!nameInput.checkValidity()) return showError("Give the library a name: 3 to 63 lowercase letters, digits and single hyphens.");
    if (!picked.photos.length) return showError("Choose photos or a folder first.");
    submit.disabled = true;
    window.addEventListener("beforeunload", stay); // leaving stops the upload (choosing the folder again resumes it)
    progressBox.hidden = false;
    delete progressBox.dataset.done;
    rows.clear();
    fileList.replaceChildren();
    try {
      const description = addingTo ? "" : document.getElementById("lib-description").value.trim();
      const done = await PMUploads.upload(library, description, picked.photos, fileHooks);
      const parts = [`${PM.number(done.uploaded)} uploaded`];
      if (done.skipped) parts.push(`${PM.number(done.skipped)} already there`);
      if (done.resent) parts.push(`${PM.number(done.resent)} sent again (${done.resent === 1 ? "it was" : "they were"} not in storage after the first upload)`);
      if (done.refused.length) parts.push(`${PM.number(done.refused.length)} refused`);
      if (done.failed.length) parts.push(`${PM.number(done.failed.length)} failed (choose them again to retry)`);
      statusLine.textContent = `Upload finished: ${parts.join(", ")}. The indexer is making tiles of ${PM.number(done.index.queued)} photo${done.index.queued === 1 ? "" : "s"}.`;
      progressBox.dataset.done = "1";
      showPhotos(library, load); // once indexed, the cards again: the new tile count
      setMode(null);
      form.reset();
      picked = { photos: [], leftOut: [] };
      chosen.textContent = "No photos chosen.";
      load();
    } catch (error) {
      showError(error.retryAfter ? `${error.message} Try again in ${error.retryAfter} s.` : error.message);
      statusLine.textContent = "Upload stopped.";
    } finally {
      submit.disabled = false;
      window.removeEventListener("beforeunload", stay);
    }
  });

  function stay(event) {
    event.preventDefault();
    event.returnValue = ""; // older browsers ask only with this set
  }

  load();
})();
