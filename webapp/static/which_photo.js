/* The job page's "which photo is where", on the finished mosaic's viewer (OpenSeadragon):
   a click on a tile asks the job's tile map which library photo it is (GET <job>/tiles?x=&y=),
   marks the cell and shows the photo with its name; "Every place it is" outlines every cell that
   photo holds (GET <job>/tiles?tile=) and steps the viewer from one to the next; "find a photo
   by name" suggests the names the mosaic uses (GET <job>/tiles?search=) and does the same. */
"use strict";

const WhichPhoto = (() => {
  /** A click (not a drag) on the mosaic names the tile under it. Returns {find(name), clear()}
      for other ways of choosing a photo. */
  function attach(viewer, job, statusUrl) {
    const panel = document.getElementById("tile-info");
    const photo = document.getElementById("tile-photo");
    const mark = PM.el("div", { class: "tile-mark" });
    let asked = 0;
    document.getElementById("tile-csv").href = `${statusUrl}/tiles?format=csv`;
    // The panel shows one cell's photo ({tile, tile_url, library, col, row, x, y, size, mirrored}).
    const showCell = (cell) => {
      photo.src = cell.tile_url;
      photo.classList.toggle("mirrored", cell.mirrored);
      document.getElementById("tile-open").href = cell.tile_url;
      document.getElementById("tile-open-link").href = cell.tile_url;
      document.getElementById("tile-name").textContent = cell.tile;
      document.getElementById("tile-where").textContent =
        `tile ${cell.col + 1}, ${cell.row + 1} (column, row) · from library ${cell.library}` +
        (cell.mirrored ? " · placed mirrored (shown as placed)" : "");
      panel.hidden = false;
      panel.dataset.tile = cell.tile;
      const rect = viewer.world.getItemAt(0).imageToViewportRectangle(cell.x, cell.y, cell.size, cell.size);
      if (mark.parentNode) viewer.updateOverlay(mark, rect);
      else viewer.addOverlay(mark, rect);
      return rect;
    };
    const places = everyPlace(viewer, showCell, statusUrl);
    findByName(places, statusUrl);
    viewer.addHandler("canvas-click", async (event) => {
      if (!event.quick) return; // the end of a drag, not a click
      const item = viewer.world.getItemAt(0);
      if (!item) return;
      const at = item.viewerElementToImageCoordinates(event.position);
      const x = Math.floor(at.x);
      const y = Math.floor(at.y);
      if (x < 0 || y < 0 || x >= job.output_width || y >= job.output_height) return;
      const seq = ++asked;
      try {
        const cell = await PM.api(`${statusUrl}/tiles?x=${x}&y=${y}`);
        if (seq !== asked) return;
        showCell(cell);
        places.reset(cell.tile, cell);
      } catch (error) {
        if (seq !== asked) return;
        document.getElementById("tile-name").textContent = error.status === 404
          ? "This mosaic was made before tile maps were kept."
          : `Could not tell: ${error.message}`;
        document.getElementById("tile-where").textContent = "";
        places.reset(null, null);
        panel.hidden = false;
      }
    });
    // For the photo picker (photo_picker.js): find a chosen photo the same way, or show none.
    return {
      find: (name) => places.find(name),
      clear() {
        places.reset(null, null);
        if (mark.parentNode) viewer.removeOverlay(mark);
        panel.hidden = true;
        viewer.viewport.goHome(); // the whole mosaic: nothing of this photo to show in it
      },
    };
  }

  /* "Every place it is": the cells one photo holds, all outlined, the viewer stepping from one
     to the next ("find your photo"). */
  function everyPlace(viewer, showCell, statusUrl) {
    const button = document.getElementById("tile-places");
    const count = document.getElementById("tile-places-count");
    const MARKED = 300; // outlines drawn at once; the rest are still stepped through
    let name = null; // the photo asked about
    let start = null; // the clicked cell, where stepping starts
    let found = null;
    let at = 0;
    let marks = [];

    function show(index) {
      const cell = found.cells[index];
      const rect = showCell({ ...cell, tile: found.tile, tile_url: found.tile_url, library: found.library, size: cell.size ?? found.size });
      // The place among its neighbours: 9 × 9 tiles, so the photo itself can be seen.
      viewer.viewport.fitBoundsWithConstraints(new window.OpenSeadragon.Rect(rect.x - 4 * rect.width, rect.y - 4 * rect.height, 9 * rect.width, 9 * rect.height));
      at = index;
      count.textContent = `${index + 1} of ${PM.number(found.count)}` +
        (found.count > found.cells.length ? ` (the first ${PM.number(found.cells.length)} are listed)` : "");
    }

    /* Every place of ``name``: outlined, ``at`` on the start cell (or the first); the count. */
    async function load() {
      const asking = name;
      const answer = await PM.api(`${statusUrl}/tiles?tile=${encodeURIComponent(asking)}`);
      if (asking !== name) return null;
      found = answer;
      const item = viewer.world.getItemAt(0);
      for (const cell of found.cells.slice(0, MARKED)) {
        const outline = PM.el("div", { class: "tile-mark-also" });
        viewer.addOverlay(outline, item.imageToViewportRectangle(cell.x, cell.y, cell.size ?? found.size, cell.size ?? found.size));
        marks.push(outline);
      }
      at = start ? Math.max(0, found.cells.findIndex((c) => c.col === start.col && c.row === start.row)) : 0;
      count.textContent = `In ${PM.number(found.count)} place${found.count === 1 ? "" : "s"}.`;
      button.textContent = "Next place ›";
      button.hidden = found.cells.length < 2;
      return found;
    }

    button.addEventListener("click", async () => {
      if (found) {
        show((at + 1) % found.cells.length);
        return;
      }
      button.disabled = true;
      try {
        await load();
      } catch (error) {
        count.textContent = `Could not tell: ${error.message}`;
      } finally {
        button.disabled = false;
      }
    });

    return {
      /** A new photo: ``photoName`` (null when the clicked cell could not be told) from ``cell``. */
      reset(photoName, cell) {
        marks.forEach((m) => viewer.removeOverlay(m));
        marks = [];
        name = photoName;
        start = cell;
        found = null;
        button.hidden = photoName === null;
        button.textContent = "Every place it is";
        count.textContent = "";
      },
      /** Find ``photoName`` by name: every place outlined, the first one shown. Its count (0 if
          the mosaic does not use it), or null when another question came first. */
      async find(photoName) {
        this.reset(photoName, null);
        const answer = await load();
        if (answer && answer.count) show(0);
        else if (answer) this.reset(null, null); // no such photo here: nothing to step through
        return answer ? answer.count : null;
      },
    };
  }

  /* "Find a photo by name": suggestions from the names the mosaic uses, then every place. */
  function findByName(places, statusUrl) {
    const form = document.getElementById("find-photo");
    const input = document.getElementById("find-name");
    const names = document.getElementById("find-names");
    const result = document.getElementById("find-result");
    let typed = 0;
    const search = (text) => PM.api(`${statusUrl}/tiles?search=${encodeURIComponent(text)}`);
    const suggest = (tiles) => names.replaceChildren(...tiles.map((t) => PM.el("option", { value: t })));
    input.addEventListener("input", () => {
      const seq = ++typed;
      const text = input.value.trim();
      if (text.length < 2) return;
      window.setTimeout(async () => {
        if (seq !== typed) return; // still typing
        try {
          const { tiles } = await search(text);
          if (seq === typed) suggest(tiles);
        } catch (error) {
          result.textContent = `Could not search: ${error.message}`;
        }
      }, 250);
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const wanted = input.value.trim();
      if (!wanted) return;
      result.textContent = "";
      try {
        const exact = await places.find(wanted);
        if (exact !== 0) return; // found by its exact name, or overtaken by a click
        const { count, tiles } = await search(wanted);
        if (count === 1) {
          input.value = tiles[0]; // the one photo whose name contains the text
          await places.find(tiles[0]);
          return;
        }
        suggest(tiles);
        result.textContent = count
          ? `${PM.number(count)} photos match: pick one of the suggestions.`
          : `No photo in this mosaic is named like “${wanted}”.`;
      } catch (error) {
        result.textContent = `Could not find it: ${error.message}`;
      }
    });
  }

  return { attach };
})();
