/* The libraries page: this browser's and the shared libraries with sample tiles, a form to make one, delete for the owner. */
"use strict";

(() => {
  const list = document.getElementById("libraries");
  const form = document.getElementById("library-form");
  const files = document.getElementById("lib-files");
  const chosen = document.getElementById("lib-chosen");
  const errorBox = document.getElementById("lib-error");
  const okBox = document.getElementById("lib-ok");
  const submit = document.getElementById("lib-submit");

  async function load() {
    try {
      const libraries = await PM.libraries();
      const cards = await Promise.all(libraries.map(async (lib) => {
        const detail = await PM.api(`${lib.url}?samples=24`);
        const card = PM.el("article", { class: "card", "data-library": lib.name },
          PM.el("h2", {}, PM.el("span", { text: lib.name }), PM.el("small", { text: lib.tile_count >= 0 ? `${PM.number(lib.tile_count)} tiles` : "" })),
          PM.el("p", { text: lib.description + (lib.shared ? " (shared)" : "") }),
          PM.repeatHint(lib.variety),
          PM.el("div", { class: "samples" }, ...detail.samples.map((src) => PM.el("img", { src, alt: "" }))));
        if (lib.owned) card.append(deleteButton(lib));
        return card;
      }));
      list.replaceChildren(...cards);
      if (!cards.length) list.append(PM.el("p", { class: "empty", text: "No libraries yet." }));
    } catch (error) {
      list.replaceChildren(PM.el("p", { class: "error", text: error.message }));
    }
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
        errorBox.textContent = error.message;
        errorBox.hidden = false;
        button.disabled = false;
      }
    });
    return button;
  }

  PM.dropzone(document.getElementById("lib-drop"), files, (picked) => {
    const total = [...picked].reduce((sum, f) => sum + f.size, 0);
    chosen.textContent = picked.length ? `${picked.length} file${picked.length === 1 ? "" : "s"} · ${(total / 1048576).toFixed(1)} MB` : "No files chosen.";
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    errorBox.hidden = true;
    okBox.hidden = true;
    const data = new FormData();
    data.append("name", document.getElementById("lib-name").value.trim());
    data.append("description", document.getElementById("lib-description").value.trim());
    for (const file of files.files) data.append("files", file);
    submit.disabled = true;
    submit.textContent = "Building tiles…";
    try {
      const created = await PM.api("/api/libraries", { method: "POST", body: data });
      const skipped = created.skipped.length ? ` (${created.skipped.length} file(s) skipped: ${created.skipped.slice(0, 3).map((s) => s.file).join(", ")})` : "";
      const note = PM.repeatNote(created.variety);
      okBox.textContent = `Library “${created.name}” is ready with ${created.tile_count} tiles${skipped}.${note ? ` ${note}` : ""}`;
      okBox.hidden = false;
      form.reset();
      chosen.textContent = "No files chosen.";
      load();
    } catch (error) {
      errorBox.textContent = error.message;
      errorBox.hidden = false;
    } finally {
      submit.disabled = false;
      submit.textContent = "Create library";
    }
  });

  load();
})();
