/* Shared helpers for every page: the API call with the CSRF header, formatting. Plain JS. */
"use strict";

const PM = (() => {
  /** fetch() a JSON API; throws an Error carrying the server's {error, detail}. */
  async function api(url, options = {}) {
    const headers = Object.assign({ "X-Requested-With": "photomosaics", Accept: "application/json" }, options.headers || {});
    const response = await fetch(url, Object.assign({ credentials: "same-origin" }, options, { headers }));
    if (response.status === 204) return null;
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    if (!response.ok) {
      const error = new Error((body && body.detail) || `The server answered ${response.status}.`);
      error.status = response.status;
      error.code = body && body.error;
      const retryAfter = Number(response.headers.get("Retry-After"));
      error.retryAfter = retryAfter > 0 ? retryAfter : null; // 429 quota, 503 busy: seconds
      throw error;
    }
    return body;
  }

  /** Every library this browser may use: GET /api/libraries page after page (a page may be
   *  short or empty and still carry a continuation; at most `pages` pages are read). */
  async function libraries(pages = 50) {
    const found = [];
    let url = "/api/libraries?limit=1000";
    for (let i = 0; i < pages && url; i += 1) {
      const page = await api(url);
      found.push(...page.libraries);
      url = page.continuation ? `/api/libraries?limit=1000&continuation=${encodeURIComponent(page.continuation)}` : null;
    }
    return found;
  }

  /** Whether a job ended by its owner's cancel (its error is webapp.api_jobs.CANCELLED). */
  const cancelled = (job) => job.status === "failed" && job.error === "cancelled by its owner";

  const number = (n) => Number(n).toLocaleString("en-US");

  function size(width, height) {
    return `${number(width)} × ${number(height)} px`;
  }

  /* A file's size as a person reads it: "35 KB", "3.4 MB", "1.2 GB" (binary units, as the limits). */
  function bytes(n) {
    if (n < 1024 * 1024) return `${Math.max(1, Math.round(n / 1024))} KB`;
    if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MB`;
    return `${(n / 1024 ** 3).toFixed(2)} GB`;
  }

  function megapixels(width, height) {
    const mp = (width * height) / 1e6;
    return mp >= 10 ? `${mp.toFixed(0)} MP` : `${mp.toFixed(1)} MP`;
  }

  function when(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    return date.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  }

  function seconds(s) {
    if (s == null) return "";
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    if (s < 90) return `${s.toFixed(1)} s`;
    return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  }

  /** What a small library does to the no-repeat rule (the API's `variety`), or "" when it keeps it. */
  function repeatNote(variety) {
    if (!variety || variety.distance >= variety.default) return "";
    const now = variety.distance === 0 ? "a photo may sit next to itself"
      : `no photo repeats within ${variety.distance} tile${variety.distance === 1 ? "" : "s"} only`;
    return `Few photos: ${now}. With ${number(variety.tiles_for_default)} photos or more, no photo repeats within ${variety.default} tiles.`;
  }

  /** ``repeatNote`` as a library card's paragraph, or null when the library keeps the rule. */
  function repeatHint(variety) {
    const text = repeatNote(variety);
    return text ? el("p", { class: "hint repeat-note", text }) : null;
  }

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value);
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  /** Wire a drop zone: dragging files over it highlights it and dropping fills its input. */
  function dropzone(zone, input, onFiles) {
    ["dragenter", "dragover"].forEach((type) => zone.addEventListener(type, (e) => { e.preventDefault(); zone.classList.add("drag"); }));
    ["dragleave", "drop"].forEach((type) => zone.addEventListener(type, () => zone.classList.remove("drag")));
    zone.addEventListener("drop", (e) => {
      e.preventDefault();
      if (!e.dataTransfer || !e.dataTransfer.files.length) return;
      input.files = e.dataTransfer.files;
      onFiles(input.files);
    });
    input.addEventListener("change", () => onFiles(input.files));
  }

  return { api, libraries, cancelled, number, size, bytes, megapixels, when, seconds, repeatNote, repeatHint, el, dropzone };
})();
