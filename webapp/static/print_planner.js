/* The print planner on the create page: paper width and DPI in, tiles across out (from
   /api/print-plan/for-paper), and back: how wide the current detail prints at that DPI. "Use this
   detail" moves the Detail slider (create.js replans the final size on its input event). With
   "Use every photo" ticked it also says the fewest tiles across that use every photo of the chosen
   library once, for this photo (/api/print-plan/every-photo). */
"use strict";

(() => {
  const paper = document.getElementById("paper");
  const width = document.getElementById("paper-width");
  const dpi = document.getElementById("dpi");
  const out = document.getElementById("print-out");
  const back = document.getElementById("print-back");
  const use = document.getElementById("print-use");
  const tileSize = document.getElementById("tile_size");
  const across = document.getElementById("tiles_across");
  const every = document.getElementById("print-every");
  const everyBox = document.getElementById("use_every_photo");
  const form = document.getElementById("create-form");
  const cellSizes = document.getElementById("cell_sizes");
  const largest = () => Number(cellSizes.value.split(",").pop()); // mixed photo sizes: the largest, in tiles
  let planned = null;
  let seq = 0;
  let everySeq = 0;

  async function updateEvery() {
    const mine = ++everySeq;
    const library = form.querySelector('input[name="library"]:checked');
    const { photoWidth, photoHeight } = form.dataset;
    if (!everyBox.checked || everyBox.disabled || !library || !photoWidth) { every.hidden = true; return; }
    const query = { library: library.value, tile_size: tileSize.value, width: photoWidth, height: photoHeight };
    try {
      const need = await PM.api(`/api/print-plan/every-photo?${new URLSearchParams(query)}`);
      if (mine !== everySeq) return;
      const now = Number(across.value);
      every.textContent = `Use every photo: ${PM.number(need.photos)} photos need at least ` +
        `${PM.number(need.tiles_across)} tiles across of ${need.tile_size} px` +
        (across.disabled ? "." : now >= need.tiles_across ? ` (now ${now}: enough).` : ` (now ${now}: too few).`);
    } catch (error) {
      if (mine !== everySeq) return;
      every.textContent = `Use every photo: ${error.message}`;
    }
    every.hidden = false;
  }

  async function update() {
    const mine = ++seq;
    const base = { tile_size: tileSize.value, dpi: dpi.value };
    try {
      const plan = await PM.api(`/api/print-plan/for-paper?${new URLSearchParams({ ...base, width_cm: width.value })}`);
      if (mine !== seq) return;
      planned = plan;
      const fits = across.disabled || plan.tiles_across <= Number(across.max);
      out.textContent = `${PM.number(plan.tiles_across)} tiles across of ${plan.tile_size} px = ${PM.number(plan.width_px)} px: ` +
        `${plan.width_cm} cm wide at ${plan.dpi} DPI` + (fits ? "." : ` — more than this photo allows at this tile size (${across.max}).`) +
        ` Each photo prints ${plan.tile_mm} mm wide` + (largest() > 1 ? `, the large ones up to ${Math.round(plan.width_cm * 100 * largest() / plan.tiles_across) / 10} mm.` : ".");
      use.disabled = across.disabled;
      if (!across.disabled) {
        const now = await PM.api(`/api/print-plan/for-grid?${new URLSearchParams({ ...base, tiles_across: across.value })}`);
        if (mine !== seq) return;
        back.textContent = `The current detail (${now.tiles_across} tiles across) prints ${now.width_cm} cm wide at ${now.dpi} DPI.`;
      }
    } catch (error) {
      if (mine !== seq) return;
      planned = null;
      use.disabled = true;
      out.textContent = error.message;
    }
  }

  paper.addEventListener("change", () => {
    if (paper.value !== "custom") width.value = paper.value;
    update();
  });
  width.addEventListener("input", () => { paper.value = "custom"; update(); });
  dpi.addEventListener("input", update);
  tileSize.addEventListener("input", update);
  cellSizes.addEventListener("change", () => { update(); updateEvery(); }); // mixed sizes turn "every photo" off
  across.addEventListener("input", update);
  for (const source of [tileSize, across, everyBox]) source.addEventListener("input", updateEvery);
  everyBox.addEventListener("change", updateEvery);
  form.addEventListener("change", (event) => { if (event.target.name === "library") updateEvery(); });
  // The slider is enabled once a photo is planned: watch for it.
  new MutationObserver(() => { update(); updateEvery(); }).observe(across, { attributes: true, attributeFilter: ["disabled", "max"] });
  use.addEventListener("click", () => {
    if (!planned || across.disabled) return;
    across.value = String(Math.min(planned.tiles_across, Number(across.max)));
    across.dispatchEvent(new Event("input", { bubbles: true }));
  });
  update();
})();
