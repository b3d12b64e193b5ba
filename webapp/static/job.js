/* The job page: live progress over Server-Sent Events, each finished slice shown in place,
   then the mosaic in OpenSeadragon (served by the app from npm: /vendor/openseadragon/) on
   its Deep Zoom pyramid (wheel, pinch, drag, buttons; down to single tiles) with downloads:
   the full-resolution JPEG where it fits the format, and the pyramid as a zip. A click on a
   tile asks the job's tile map which library photo it is (GET <job>/tiles?x=&y=), marks the
   cell and shows the photo with its name; "Every place it is" marks all the cells that photo
   holds (GET <job>/tiles?tile=) and steps the viewer from one to the next; "find a photo by
   name" suggests the names the mosaic uses (GET <job>/tiles?search=) and does the same. */
"use strict";

(() => {
  const root = document.getElementById("job");
  const statusUrl = root.dataset.statusUrl;
  const stage = document.getElementById("stage");
  const stageSource = document.getElementById("stage-source");
  const statusBadge = document.getElementById("status");
  const bar = document.getElementById("bar");
  const progressbar = document.getElementById("progressbar");
  const percent = document.getElementById("percent");
  const progressText = document.getElementById("progress-text");
  const errorBox = document.getElementById("job-error");
  const bands = new Map(); // slice number -> band element
  let stream = null;
  let shownResult = false;

  const STATUS_TEXT = {
    queued: "waiting for the controller…",
    slicing: "cutting the photo into slices…",
    rendering: "workers are placing tiles…",
    stitching: "stitching the slices together…",
    done: "finished.",
    failed: "failed.",
  };
  // Submitted while the primary storage account was down: kept on the paired secondary (dal.availability.failover).
  const WAITING_FOR_STORAGE = "waiting for storage to recover: your photo is safe, the job starts when it is back.";

  function buildStage(job) {
    if (bands.size || !job.bands.length) return;
    stage.style.aspectRatio = `${job.output_width} / ${job.output_height}`;
    stageSource.src = job.preview_url + "?size=1600";
    job.bands.forEach(([start, stop], n) => {
      const band = PM.el("div", { class: "band waiting", "data-slice": String(n) });
      band.style.top = `${(100 * start) / job.tiles_down}%`;
      band.style.height = `${(100 * (stop - start)) / job.tiles_down}%`;
      stage.append(band);
      bands.set(n, band);
    });
  }

  function showSlices(job) {
    for (const n of job.slices_done) {
      const band = bands.get(n);
      if (!band || band.dataset.loaded) continue;
      band.dataset.loaded = "1";
      const img = PM.el("img", { alt: `Slice ${n + 1}`, src: `${statusUrl}/slices/${n}` });
      img.addEventListener("load", () => band.classList.remove("waiting"));
      band.append(img);
    }
  }

  function render(job) {
    buildStage(job);
    const pct = Math.round(job.progress * 100);
    statusBadge.textContent = job.waiting_for_storage ? "waiting for storage" : job.status;
    statusBadge.dataset.status = job.status;
    bar.style.width = `${pct}%`;
    progressbar.setAttribute("aria-valuenow", String(pct));
    percent.textContent = `${pct} %`;
    const stateText = job.waiting_for_storage ? WAITING_FOR_STORAGE : (STATUS_TEXT[job.status] || job.status);
    progressText.textContent = `${job.slices_done.length} of ${job.slices} slices · ${stateText}`;
    document.getElementById("job-facts").textContent =
      `${PM.size(job.output_width, job.output_height)} · ${job.tiles_across} × ${job.tiles_down} tiles of ${job.tile_size} px · ` +
      `library ${job.library} · ${job.slices} slice${job.slices === 1 ? "" : "s"} · ${PM.seconds(job.elapsed_seconds)}`;
    showSlices(job);
    if (job.status === "failed") {
      errorBox.textContent = `The mosaic could not be made: ${job.error || "unknown error"}`;
      errorBox.hidden = false;
    }
    if (job.status === "done" && job.result_url && !shownResult) {
      shownResult = true;
      showResult(job);
    }
  }

  function renderEvents(events) {
    const body = document.getElementById("events");
    body.replaceChildren(...events.map((e) => PM.el("tr", {},
      PM.el("td", { text: new Date(e.at).toLocaleTimeString() }),
      PM.el("td", { text: e.actor }),
      PM.el("td", { text: e.message }),
      PM.el("td", { text: PM.seconds(e.seconds) }))));
  }

  async function refresh() {
    try {
      const job = await PM.api(statusUrl);
      render(job);
      renderEvents(job.events || []);
      return job;
    } catch (error) {
      errorBox.textContent = error.status === 404 ? "There is no such mosaic (or it belongs to another browser)." : error.message;
      errorBox.hidden = false;
      document.getElementById("progress-card").hidden = true;
      return null;
    }
  }

  // A stream ends after a few minutes with a reconnect event, and the server may refuse one
  // (429: too many streams); then the job is polled and the stream tried again, waiting longer each time.
  let streamWait = 2000;
  function follow(job) {
    if (!window.EventSource || job.status === "done" || job.status === "failed") return;
    stream = new EventSource(job.events_url);
    stream.addEventListener("job", (e) => { streamWait = 2000; render(JSON.parse(e.data)); });
    stream.addEventListener("end", () => { stream.close(); refresh(); });
    stream.addEventListener("reconnect", (e) => {
      stream.close();
      const after = JSON.parse(e.data).after_ms || streamWait;
      setTimeout(() => refresh().then((j) => j && follow(j)), after);
    });
    stream.onerror = () => {
      // The browser reconnects by itself after a dropped connection; a refused one is CLOSED.
      if (stream.readyState !== EventSource.CLOSED) return;
      setTimeout(() => refresh().then((j) => j && follow(j)), streamWait);
      streamWait = Math.min(streamWait * 2, 30000);
    };
  }

  /* ---- the viewer: OpenSeadragon on the job's Deep Zoom pyramid, down to single tiles ---- */
  function showResult(job) {
    const card = document.getElementById("viewer-card");
    const viewport = document.getElementById("viewport");
    const level = document.getElementById("zoom-level");
    const download = document.getElementById("download");
    const downloadZip = document.getElementById("download-zip");
    const fullJpeg = job.output_width <= 65500 && job.output_height <= 65500; // libjpeg's limit (workers/stitching.py); else the zip is the full image
    download.href = `${job.result_url}?download=1`;
    download.textContent = fullJpeg ? "Download JPEG" : "Download (Deep Zoom zip)";
    if (job.pyramid_url && fullJpeg) {
      downloadZip.href = job.pyramid_url;
      downloadZip.hidden = false;
    }
    if (!fullJpeg) {
      // No full-size JPEG can exist: offer the largest preview as a JPEG beside the zip.
      const reduced = document.getElementById("download-reduced");
      reduced.href = `${job.preview_url}?size=1600`;
      reduced.hidden = false;
    }
    stage.hidden = true;
    document.getElementById("progress-card").classList.add("finished");
    card.hidden = false;
    // As tall as the picture needs at this width, within 240 px .. 75 % of the window.
    const wanted = (viewport.clientWidth * job.output_height) / job.output_width;
    viewport.style.height = `${Math.round(Math.max(240, Math.min(window.innerHeight * 0.75, wanted)))}px`;
    if (!window.OpenSeadragon) {
      errorBox.textContent = "The deep-zoom viewer is not installed (npm ci); use Download.";
      errorBox.hidden = false;
      return;
    }
    // One mosaic tile about 120 screen pixels wide at "Tiles"; allow twice that.
    const tileZoom = 120 / job.tile_size;
    const viewer = window.OpenSeadragon({
      element: viewport,
      tileSources: job.dzi_url || { type: "image", url: job.result_url },
      prefixUrl: "/vendor/openseadragon/images/",
      drawer: "canvas",
      imageSmoothingEnabled: false, // zoomed past 1:1, show the pixels of each tile, not a blur
      showNavigationControl: false, // our own buttons below
      maxZoomPixelRatio: Math.max(4, 2 * tileZoom),
      visibilityRatio: 1,
      constrainDuringPan: true,
      gestureSettingsMouse: { clickToZoom: false, dblClickToZoom: true },
    });
    let triedImage = false;
    viewer.addHandler("open-failed", () => {
      // A job finished before pyramids existed: the plain image, same viewer.
      if (!triedImage && job.result_url && fullJpeg) {
        triedImage = true;
        viewer.open({ type: "image", url: job.result_url });
      }
    });
    const imageZoom = () => {
      const item = viewer.world.getItemAt(0);
      return item ? item.viewportToImageZoom(viewer.viewport.getZoom(true)) : 0;
    };
    const report = () => {
      const zoom = imageZoom();
      level.textContent = `${Math.round(zoom * 100)} %`;
      viewport.dataset.imageZoom = zoom.toFixed(4);
      const item = viewer.world.getItemAt(0);
      viewport.dataset.loaded = item && item.getFullyLoaded() ? "1" : "0";
    };
    viewer.addHandler("animation", report);
    viewer.addHandler("animation-finish", report);
    viewer.addHandler("open", () => {
      viewport.dataset.opened = "1";
      const item = viewer.world.getItemAt(0);
      item.addHandler("fully-loaded-change", report);
      report();
    });
    whichPhoto(viewer, job);
    const zoomBy = (factor) => viewer.viewport.zoomBy(factor);
    document.getElementById("zoom-in").addEventListener("click", () => zoomBy(1.6));
    document.getElementById("zoom-out").addEventListener("click", () => zoomBy(1 / 1.6));
    document.getElementById("zoom-fit").addEventListener("click", () => viewer.viewport.goHome());
    document.getElementById("zoom-tile").addEventListener("click", () => {
      const item = viewer.world.getItemAt(0);
      if (item) viewer.viewport.zoomTo(item.imageToViewportZoom(tileZoom));
    });
  }

  /* ---- which photo is where: a click (not a drag) on the mosaic names the tile under it ---- */
  function whichPhoto(viewer, job) {
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
    const places = everyPlace(viewer, showCell);
    findByName(places);
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
  }

  /* "Every place it is": the cells one photo holds, all outlined, the viewer stepping from one
     to the next ("find your photo"). */
  function everyPlace(viewer, showCell) {
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
      const rect = showCell({ ...cell, tile: found.tile, tile_url: found.tile_url, library: found.library, size: found.size });
      // The place among its neighbours: 9 × 9 tiles, so the photo itself can be seen.
      viewer.viewport.fitBounds(new window.OpenSeadragon.Rect(rect.x - 4 * rect.width, rect.y - 4 * rect.height, 9 * rect.width, 9 * rect.height));
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
        viewer.addOverlay(outline, item.imageToViewportRectangle(cell.x, cell.y, found.size, found.size));
        marks.push(outline);
      }
      at = start ? Math.max(0, found.cells.findIndex((c) => c.col === start.col && c.row === start.row)) : 0;
      count.textContent = `In ${PM.number(found.count)} place${found.count === 1 ? "" : "s"}.`;
      button.textContent = "Next place ›";
      button.hidden = found.cells.length < 2;
      root.dataset.places = String(found.count);
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
        delete root.dataset.places;
      },
      /** Find ``photoName`` by name: every place outlined, the first one shown; its count, 0 if none. */
      async find(photoName) {
        this.reset(photoName, null);
        const answer = await load();
        if (answer && answer.count) show(0);
        else if (answer) this.reset(null, null); // no such photo here: nothing to step through
        return answer ? answer.count : 0;
      },
    };
  }

  /* "Find a photo by name": suggestions from the names the mosaic uses, then every place. */
  function findByName(places) {
    const form = document.getElementById("find-photo");
    const input = document.getElementById("find-name");
    const names = document.getElementById("find-names");
    const result = document.getElementById("find-result");
    let typed = 0;
    input.addEventListener("input", () => {
      const seq = ++typed;
      const text = input.value.trim();
      if (text.length < 2) return;
      window.setTimeout(async () => {
        if (seq !== typed) return; // still typing
        try {
          const { tiles } = await PM.api(`${statusUrl}/tiles?search=${encodeURIComponent(text)}`);
          if (seq === typed) names.replaceChildren(...tiles.map((t) => PM.el("option", { value: t })));
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
        if (await places.find(wanted)) return; // its exact name
        const { count, tiles } = await PM.api(`${statusUrl}/tiles?search=${encodeURIComponent(wanted)}`);
        if (count === 1) {
          input.value = tiles[0]; // the one photo whose name contains the text
          await places.find(tiles[0]);
          return;
        }
        names.replaceChildren(...tiles.map((t) => PM.el("option", { value: t })));
        result.textContent = count
          ? `${PM.number(count)} photos match: pick one of the suggestions.`
          : `No photo in this mosaic is named like “${wanted}”.`;
      } catch (error) {
        result.textContent = `Could not find it: ${error.message}`;
      }
    });
  }

  refresh().then((job) => job && follow(job));
})();
