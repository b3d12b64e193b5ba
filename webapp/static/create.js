/* The create page: pick a photo (preview), a library (sample tiles), settings with the final
   size from /api/plan, then POST /api/jobs and go to the job's page. The "tiles ↔ photo"
   slider (correction) shows what it does on three of the library's own photos, tinted here as
   the engine tints a placed tile (correction.js): one offset for the whole tile toward its cell's colour. */
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
  const correction = document.getElementById("correction");
  const swatches = document.getElementById("correction-swatches");
  // Three colours a spot of a photo often has (sky, sunset, foliage), for the example tiles.
  const EXAMPLE_CELLS = [[78, 138, 204], [226, 140, 62], [52, 112, 64]];
  const EXAMPLE_SIDE = 64;
  let exampleTiles = []; // loaded <img> of the chosen library's samples
  const maxUploadBytes = Number(form.dataset.maxUploadMb) * 1024 * 1024;
  const DEFAULT_ACROSS = 100;
  let photo = null; // {file, width, height}
  let planTimer = null;
  let planSeq = 0;
  let reachTimer = null;
  let reachSeq = 0;

  function correctionWords(percent) {
    if (percent === 0) return "tiles exactly as photographed";
    if (percent <= 30) return "tiles keep nearly their own colours";
    if (percent <= 60) return "tiles tinted part of the way: photos up close, your picture from afar";
    if (percent < 100) return "strongly tinted tiles: your picture reads from closer";
    return "each tile's average colour is its spot's";
  }

  /** Draw each example tile moved ``percent`` % of the way toward its cell's colour, as a whole. */
  function drawExample() {
    const percent = Number(correction.value);
    document.getElementById("correction_out").textContent = `${percent} %`;
    correction.setAttribute("aria-valuetext", `${percent} %: ${correctionWords(percent)}`);
    swatches.replaceChildren(...EXAMPLE_CELLS.map((cell, i) => {
      const canvas = PM.el("canvas", { width: String(EXAMPLE_SIDE), height: String(EXAMPLE_SIDE), class: "example-tile" });
      const tile = exampleTiles.length ? exampleTiles[i % exampleTiles.length] : null;
      if (tile) correct(canvas, tile, cell, percent);
      const spot = PM.el("span", { class: "example-cell", title: "the colour of the tile's spot in your photo" });
      spot.style.backgroundColor = `rgb(${cell.join(",")})`;
      return PM.el("div", { class: "example" }, canvas, spot);
    }));
    swatches.dataset.percent = String(percent);
  }

  function correct(canvas, tile, cell, percent) {
    const context = canvas.getContext("2d");
    context.drawImage(tile, 0, 0, EXAMPLE_SIDE, EXAMPLE_SIDE);
    const image = context.getImageData(0, 0, EXAMPLE_SIDE, EXAMPLE_SIDE);
    const px = image.data;
    const mean = [0, 0, 0];
    for (let i = 0; i < px.length; i += 4) for (let c = 0; c < 3; c++) mean[c] += px[i + c];
    const count = px.length / 4;
    const offset = PMCorrection.offset(mean.map((sum) => Math.round(sum / count)), cell, percent);
    for (let i = 0; i < px.length; i += 4) for (let c = 0; c < 3; c++) px[i + c] = px[i + c] + offset[c];
    context.putImageData(image, 0, 0); // Uint8ClampedArray: the few pixels past 0 or 255 clip
  }

  function loadExampleTiles() {
    const chosen = form.querySelector('input[name="library"]:checked');
    const label = chosen && chosen.closest(".library-option");
    const sources = label ? [...label.querySelectorAll(".samples img")].map((img) => img.src) : [];
    const picked = [0, 1, 2].map((i) => sources[Math.floor((i * sources.length) / 3)]).filter(Boolean);
    exampleTiles = [];
    Promise.all(picked.map((src) => new Promise((resolve) => {
      const img = new Image();
      img.onload = () => resolve(img);
      img.onerror = () => resolve(null);
      img.src = src;
    }))).then((loaded) => {
      exampleTiles = loaded.filter(Boolean);
      drawExample();
    });
  }

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
      const libraries = await PM.libraries();
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
          PM.repeatHint(lib.variety),
          samples);
        radio.addEventListener("change", () => { ready(); loadExampleTiles(); scheduleReach(); });
        libraryList.append(label);
      });
      ready();
      loadExampleTiles();
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
      photo = { file };
      preview.src = url;
      sizeKnown(probe.naturalWidth, probe.naturalHeight, true, "");
      scheduleReach();
    };
    probe.onerror = () => {
      // The browser cannot show it (TIFF, or not an image at all): the server checks it and
      // plans the grid itself; its answer says what is wrong if anything is.
      URL.revokeObjectURL(url);
      photo = { file, width: null, height: null };
      delete form.dataset.photoWidth;
      delete form.dataset.photoHeight;
      preview.hidden = true;
      empty.hidden = false;
      info.textContent = `${file.name} · ${PM.bytes(file.size)} · no preview in this browser`;
      across.disabled = true;
      document.getElementById("final-dims").textContent = "planned on upload";
      document.getElementById("final-extra").textContent = "This browser cannot read the photo's size; the server will choose the grid.";
      ready();
      scheduleReach(); // the server reads it (a HEIC in Chrome): its answer gives the size, then the grid is planned here
    };
    probe.src = url;
  }

  /** Ask the server for the grid; on a new photo first learn the largest grid that fits. */
  async function plan(fresh) {
    if (!photo || photo.width === null) return;
    const seq = ++planSeq;
    const params = new URLSearchParams({ width: photo.width, height: photo.height, tile_size: tileSize.value });
    const sizes = document.getElementById("cell_sizes").value;
    if (sizes !== "1") params.set("cell_sizes", sizes); // its slices align to the largest cell
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

  /** Before the job: does the library reach the photo's colours? (POST /api/plan: a small
   *  preview rendered by the engine.) Shown only when it does not, with what "photo" would give. */
  async function checkReach() {
    const library = form.querySelector('input[name="library"]:checked');
    const box = document.getElementById("reach");
    if (!photo || !library) { box.hidden = true; return; }
    const seq = ++reachSeq;
    const asked = photo; // another photo chosen meanwhile: this answer is not about it
    const data = new FormData();
    data.append("image", photo.file);
    data.append("library", library.value);
    data.append("tile_size", tileSize.value);
    if (photo.width !== null && !across.disabled) data.append("tiles_across", across.value);
    data.append("correction", correction.value);
    const sizes = document.getElementById("cell_sizes").value;
    if (sizes !== "1") { // the preview as the job will be: large photos where they fit
      data.append("cell_sizes", sizes);
      data.append("split", document.getElementById("split").value);
    }
    try {
      const answer = await PM.api("/api/plan", { method: "POST", body: data });
      if (seq !== reachSeq || photo !== asked) return;
      if (photo.width === null) learnSize(answer.photo);
      const reach = answer.reach;
      box.hidden = !reach.warn;
      box.dataset.checked = `${library.value}:${tileSize.value}:${correction.value}:${sizes}`; // what it was measured for
      document.getElementById("reach-message").textContent = reach.message;
      showPreview(document.getElementById("reach-preview"), reach.preview);
      showPreview(document.getElementById("reach-toward"), reach.preview_toward_photo);
    } catch (error) {
      if (seq === reachSeq) box.hidden = true; // the submission says what is wrong, if anything
    }
  }

  /** The size and picture the server read from a photo this browser cannot show (a HEIC in
   *  Chrome): the picture is shown and the grid planned as for any other photo. */
  function learnSize(size) {
    if (size.preview) showPreview(preview, size.preview);
    sizeKnown(size.width, size.height, Boolean(size.preview), " · shown as the server read it");
  }

  /** The photo's size known (read by the browser or by the server): said, its picture shown when
   *  there is one, and the grid planned. */
  function sizeKnown(width, height, shown, note) {
    photo = { ...photo, width, height };
    form.dataset.photoWidth = String(width); // the print planner's "use every photo" reads it
    form.dataset.photoHeight = String(height);
    if (shown) {
      preview.hidden = false;
      empty.hidden = true;
    }
    info.textContent = `${photo.file.name} · ${PM.size(width, height)} · ${PM.bytes(photo.file.size)}${note}`;
    across.disabled = false;
    across.dataset.touched = "";
    plan(true);
  }

  /** A data: URL shown through a blob: URL (the page's CSP allows img-src 'self' blob: only). */
  function showPreview(img, dataUrl) {
    const [head, body] = dataUrl.split(",", 2);
    const binary = atob(body);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
    if (img.src.startsWith("blob:")) URL.revokeObjectURL(img.src);
    img.src = URL.createObjectURL(new Blob([bytes], { type: head.slice(5).split(";")[0] }));
  }

  function scheduleReach() {
    clearTimeout(reachTimer);
    reachTimer = setTimeout(checkReach, 400);
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
  correction.addEventListener("input", drawExample);
  correction.addEventListener("change", scheduleReach);
  tileSize.addEventListener("change", scheduleReach);

  /* Photo sizes: a large cell is its photo at size x tile px, from the library's 64 px tiles
     (and at least 4 px a tile); a mixed mosaic is chosen part by part, so it takes neither fair
     use nor "use every photo" (the API answers 422 invalid_plan for either). */
  const cellSizes = document.getElementById("cell_sizes");
  const split = document.getElementById("split");
  const maxUsesBox = document.getElementById("max_uses");
  const everyPhotoBox = document.getElementById("use_every_photo");
  const cellWords = document.getElementById("cell_sizes_words");
  const cellText = cellWords.textContent;
  function fitCellSizes() {
    const size = Number(tileSize.value);
    const refused = [];
    for (const option of cellSizes.options) {
      const largest = Number(option.value.split(",").pop());
      option.disabled = largest > 1 && (size < 4 || size * largest > 64);
      if (option.disabled) refused.push(largest);
    }
    if (cellSizes.selectedOptions[0].disabled) cellSizes.value = "1";
    const mixed = cellSizes.value !== "1";
    document.getElementById("split_field").hidden = !mixed;
    maxUsesBox.disabled = mixed;
    everyPhotoBox.disabled = mixed;
    cellWords.textContent = refused.length === 0 ? cellText
      : size < 4 ? `${cellText} Mixed sizes need tiles of 4 px or more.`
      : refused.includes(2) ? `${cellText} Mixed sizes need tiles of at most 32 px (16 px for four times as large).`
      : `${cellText} Photos four times as large need tiles of at most 16 px.`;
  }
  tileSize.addEventListener("input", fitCellSizes);
  cellSizes.addEventListener("change", () => { fitCellSizes(); schedulePlan(); scheduleReach(); });
  split.addEventListener("input", () => { document.getElementById("split_out").textContent = split.value; });
  split.addEventListener("change", scheduleReach);
  fitCellSizes();

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
    data.append("correction", correction.value);
    const maxUses = maxUsesBox.value.trim();
    if (maxUses !== "" && !maxUsesBox.disabled) data.append("max_uses", maxUses);
    if (everyPhotoBox.checked && !everyPhotoBox.disabled) data.append("use_every_photo", "true");
    if (cellSizes.value !== "1") {
      data.append("cell_sizes", cellSizes.value);
      data.append("split", split.value);
    }
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
  drawExample();
  loadLibraries();
})();
