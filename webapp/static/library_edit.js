/* The owner's changes from a library's Photos panel: rename the library inline
 * (PATCH /api/libraries/<name>, errors beside the field) and remove the photos ticked on its
 * cards, "select all on this page" included, after a confirm (POST .../remove-photos, 1,000 a
 * request). The panel (PMLibraryPhotos) draws the cards; this module keeps what is ticked. */
"use strict";

const PMLibraryEdit = (() => {
  const settings = { removeBatch: 1000 }; // the API's most photos per removal request
  const NAME_RULE = "A library's name is 3 to 63 lowercase letters, digits and single hyphens.";
  const plural = (n, word) => `${PM.number(n)} ${word}${n === 1 ? "" : "s"}`;

  /** The Rename button and its inline form; `onRenamed(newName)` once storage has it. */
  function renamer(library, onRenamed) {
    const id = `rename-${library}`;
    const input = PM.el("input", {
      type: "text", id: `${id}-name`, name: "name", value: library, required: "", minlength: "3", maxlength: "63",
      pattern: "[a-z0-9](-?[a-z0-9])*", autocomplete: "off", spellcheck: "false", "aria-describedby": `${id}-error`,
    });
    const error = PM.el("p", { class: "error field-error", id: `${id}-error`, role: "alert", hidden: "" });
    const save = PM.el("button", { type: "submit", class: "button primary", text: "Save name" });
    const cancel = PM.el("button", { type: "button", class: "button", text: "Cancel" });
    const form = PM.el("form", { class: "rename-form", id: `${id}-form`, novalidate: "", hidden: "" },
      PM.el("label", { for: input.id, text: "New name" }),
      PM.el("div", { class: "rename-row" }, input, save, cancel), error);
    const open = PM.el("button", {
      type: "button", class: "button rename-open", text: "Rename library", "aria-expanded": "false", "aria-controls": form.id,
    });

    const say = (message) => {
      error.textContent = message;
      error.hidden = !message;
      if (message) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    };
    const toggle = (editing) => {
      form.hidden = !editing;
      open.hidden = editing;
      open.setAttribute("aria-expanded", String(editing));
      say("");
      if (editing) {
        input.value = library;
        input.focus();
        input.select();
      } else open.focus();
    };
    open.addEventListener("click", () => toggle(true));
    cancel.addEventListener("click", () => toggle(false));
    input.addEventListener("input", () => say(""));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const name = input.value.trim();
      if (name === library) return toggle(false);
      if (!input.checkValidity()) return say(NAME_RULE);
      save.disabled = true;
      try {
        const renamed = await PM.api(`/api/libraries/${encodeURIComponent(library)}`, {
          method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ name }),
        });
        onRenamed(renamed.name);
      } catch (error_) {
        say(error_.message);
        input.focus();
      } finally {
        save.disabled = false;
      }
    });
    return PM.el("div", { class: "rename" }, open, form);
  }

  /**
   * What is ticked, across pages: `tools` (select all on this page, the count, Remove),
   * `checkbox(name)` for a card, `page(names)` when a page is drawn. `onRemoved(removed)` after
   * a removal; its outcome is said in `status`.
   */
  function selection(library, onRemoved) {
    const chosen = new Set();
    let boxes = new Map(); // the cards' checkboxes of the page shown
    const all = PM.el("input", { type: "checkbox", id: `select-all-${library}` });
    const count = PM.el("span", { class: "hint selected-count", "aria-live": "polite" });
    const remove = PM.el("button", { type: "button", class: "button danger remove-photos", text: "Remove selected", disabled: "" });
    const status = PM.el("p", { class: "remove-status", "aria-live": "polite", hidden: "" }); // the panel's progress line is its role=status
    const tools = PM.el("div", { class: "photo-tools" },
      PM.el("label", { class: "select-all", for: all.id }, all, "Select all on this page"), count, remove);

    function update() {
      const names = [...boxes.keys()];
      const ticked = names.filter((name) => chosen.has(name)).length;
      all.checked = names.length > 0 && ticked === names.length;
      all.indeterminate = ticked > 0 && ticked < names.length;
      all.disabled = !names.length;
      count.textContent = chosen.size ? `${PM.number(chosen.size)} selected` : "";
      remove.disabled = !chosen.size;
      remove.textContent = chosen.size ? `Remove ${plural(chosen.size, "photo")}…` : "Remove selected";
    }

    function checkbox(name) {
      const box = PM.el("input", { type: "checkbox", class: "pick", "aria-label": `Select ${name}` });
      box.checked = chosen.has(name);
      box.addEventListener("change", () => {
        if (box.checked) chosen.add(name);
        else chosen.delete(name);
        update();
      });
      boxes.set(name, box);
      return box;
    }

    const page = () => { boxes = new Map(); };

    all.addEventListener("change", () => {
      for (const [name, box] of boxes) {
        box.checked = all.checked;
        if (all.checked) chosen.add(name);
        else chosen.delete(name);
      }
      update();
    });

    remove.addEventListener("click", async () => {
      const names = [...chosen].sort();
      const which = names.length === 1 ? `“${names[0]}”` : plural(names.length, "photo");
      if (!window.confirm(`Remove ${which} from “${library}”? Mosaics already made keep them.`)) return;
      remove.disabled = true;
      const removed = [];
      try {
        for (let start = 0; start < names.length; start += settings.removeBatch) {
          const answer = await PM.api(`/api/libraries/${encodeURIComponent(library)}/remove-photos`, {
            method: "POST", headers: { "Content-Type": "application/json" },
            body: JSON.stringify({ photos: names.slice(start, start + settings.removeBatch) }),
          });
          removed.push(...answer.removed, ...answer.not_found); // not found: gone already
        }
        status.textContent = `Removed ${plural(removed.length, "photo")}.`;
        status.classList.remove("error");
      } catch (error) {
        status.textContent = `Could not remove: ${error.message}`;
        status.classList.add("error");
      }
      status.hidden = false;
      removed.forEach((name) => chosen.delete(name));
      update();
      if (removed.length) onRemoved(removed);
    });

    update();
    return { tools, status, checkbox, page, update };
  }

  return { settings, renamer, selection };
})();
