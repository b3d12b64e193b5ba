/* The create page: pick a photo (preview), a library (sample tiles), settings with the final
   size from /api/plan, then POST /api/jobs and go to the job's page. */
"use strict";

(() => {
  const form = document.getElementById("create-form");
  const input = document.getElementById("image");
  const preview = document.getElementById("preview");
  const empty = document.getElementById("dz-empty");
  const info = document.getElementById("photo-info");
  const submit = document.getElementById("submit");
  const errorBox = document.getElementById("form-error");
  const libraryList = document.getElementById("library-list");
  const tileSize = document.getElementById("tile_size");
  const across = document.getElementById("tiles_across");
  const slices = document.getElementById("slices");
  const maxUploadBytes = Number(form.dataset.maxUploadMb) * 1024 * 1024;
  const DEFAULT_ACROSS = 100;
  let photo = null; // {file, width, height}
  let planTimer = null;
  let planSeq = 0;

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
  }

  function ready() {
    const library = form.querySelector('input[name="library"]:checked');
    submit.disabled = !(photo && library && (photo.width === null || !across.disabled));
  }

  async function loadLibraries() {
    try {
      const { libraries } = await PM.api("/api/libraries");
      libraryList.replaceChildren();
      if (!libraries.length) {
        libraryList.append(PM.el("p", { class: "hint", text: "No tile library yet: create one on the Libraries page." }));
        return;
      }
      libraries.forEach((lib, index) => {
        const radio = PM.el("input", { type: "radio", name: "library", value: lib.name, checked: index === 0 ? "checked" : null });
        const samples = PM.el("div", { class: "samples" }, ...lib.samples.map((src) => PM.el("img", { src, alt: "", loading: "lazy" })));
        const count = lib.tile_count >= 0 ? `${PM.number(lib.tile_count)} tiles` : "";
        const label = PM.el("label", { class: "library-option", "data-library": lib.name },
          radio,
          PM.el("span", { class: "title" }, PM.el("span", { text: lib.name }), PM.el("small", { text: count })),
          PM.el("p", { text: lib.description }),
          samples);
        radio.addEventListener("change", ready);
        libraryList.append(label);
      });
      ready();
    } catch (error) {
      libraryList.replaceChildren(PM.el("p", { class: "error", text: `Could not load the libraries: ${error.message}` }));
    }
  }

  function choose(files) {
    showError("");
    const file = files && files[0];
    if (!file) return;
    if (file.size > maxUploadBytes) {
      showError(`That file is ${(file.size / 1048576).toFixed(1)} MB; the limit is ${form.dataset.maxUploadMb} MB.`);
      return;
    }
    const url = URL.createObjectURL(file);
    const probe = new Image();
    probe.onload = () => {
      photo = { file, width: probe.naturalWidth, height: probe.naturalHeight };
      preview.src = url;
      preview.hidden = false;
      empty.hidden = true;
      info.textContent = `${file.name} · ${PM.size(photo.width, photo.height)} · ${(file.size / 1048576).toFixed(1)} MB`;
      across.dataset.touched = "";
      plan(true);
    };
    probe.onerror = () => {
      // The browser cannot show it (TIFF, or not an image at all): the server checks it and
      // plans the grid itself; its answer says what is wrong if anything is.
      URL.revokeObjectURL(url);
      photo = { file, width: null, height: null };
      preview.hidden = true;
      empty.hidden = false;
      info.textContent = `${file.name} · ${(file.size / 1048576).toFixed(1)} MB · no preview in this browser`;
      across.disabled = true;
      document.getElementById("final-dims").textContent = "planned on upload";
      document.getElementById("final-extra").textContent = "This browser cannot read the photo's size; the server will choose the grid.";
      ready();
    };
    probe.src = url;
  }

  /** Ask the server for the grid; on a new photo first learn the largest grid that fits. */
  async function plan(fresh) {
    if (!photo || photo.width === null) return;
    const seq = ++planSeq;
    const params = new URLSearchParams({ width: photo.width, height: photo.height, tile_size: tileSize.value });
    try {
      if (fresh || across.dataset.max === undefined || across.dataset.tile !== tileSize.value) {
        const auto = await PM.api(`/api/plan?${params}`);
        if (seq !== planSeq) return;
        across.max = String(Math.max(auto.max_tiles_across || auto.tiles_across, 1)); // up to the hard limit (400 MP)
        across.min = String(Math.min(4, auto.tiles_across));
        across.dataset.max = across.max;
        across.dataset.tile = tileSize.value;
        if (!across.dataset.touched) across.value = String(Math.min(DEFAULT_ACROSS, auto.tiles_across));
        across.disabled = false;
      }
      params.set("tiles_across", across.value);
      const grid = await PM.api(`/api/plan?${params}`);
      if (seq !== planSeq) return;
      document.getElementById("tiles_across_out").textContent = `${grid.tiles_across} tiles across`;
      document.getElementById("final-dims").textContent = PM.size(grid.output_width, grid.output_height);
      document.getElementById("final-extra").textContent =
        `${grid.tiles_across} × ${grid.tiles_down} = ${PM.number(grid.tiles_across * grid.tiles_down)} tiles · ${PM.megapixels(grid.output_width, grid.output_height)}`;
      slices.max = String(grid.max_slices);
      slices.min = String(grid.min_slices || 1); // a giant mosaic needs more slices (50 MP each at most)
      if (Number(slices.value) < grid.min_slices) slices.value = String(grid.min_slices);
      if (Number(slices.value) > grid.max_slices) slices.value = String(grid.max_slices);
      document.getElementById("slices_out").textContent = slices.value;
      ready();
    } catch (error) {
      showError(error.message);
    }
  }

  function schedulePlan() {
    clearTimeout(planTimer);
    planTimer = setTimeout(() => plan(false), 120);
  }

  tileSize.addEventListener("input", () => {
    document.getElementById("tile_size_out").textContent = `${tileSize.value} px`;
    schedulePlan();
  });
  across.addEventListener("input", () => {
    across.dataset.touched = "1";
    document.getElementById("tiles_across_out").textContent = `${across.value} tiles across`;
    schedulePlan();
  });
  slices.addEventListener("input", () => { document.getElementById("slices_out").textContent = slices.value; });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (submit.disabled) return;
    showError("");
    const data = new FormData();
    data.append("image", photo.file);
    data.append("library", form.querySelector('input[name="library"]:checked').value);
    data.append("tile_size", tileSize.value);
    if (photo.width !== null) data.append("tiles_across", across.value);
    data.append("slices", slices.value);
    const maxUses = document.getElementById("max_uses").value.trim();
    if (maxUses !== "") data.append("max_uses", maxUses);
    submit.disabled = true;
    submit.textContent = "Uploading…";
    try {
      const created = await PM.api("/api/jobs", { method: "POST", body: data });
      window.location.assign(`/jobs/${created.request_id}`);
    } catch (error) {
      if (error.code === "service_busy") {
        showError(`The service is busy, try again in ${error.retryAfter || 30} s.`); // backpressure: 503
      } else if (error.code === "quota_exceeded" && error.retryAfter) {
        showError(`${error.message} (try again in ${error.retryAfter} s)`);
      } else {
        showError(error.message);
      }
      submit.textContent = "Make my mosaic";
      ready();
    }
  });

  PM.dropzone(document.getElementById("dropzone"), input, choose);
  loadLibraries();
})();
