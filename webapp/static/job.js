/* The job page: live progress over Server-Sent Events, each finished slice shown in place,
   then the mosaic in OpenSeadragon (served by the app from npm: /vendor/openseadragon/) on
   its Deep Zoom pyramid (wheel, pinch, drag, buttons; down to single tiles) with downloads:
   the full-resolution JPEG where it fits the format, and the pyramid as a zip. A click on a
   tile names the library photo in it, and finds every place a photo holds (which_photo.js);
   beside the viewer, the library's thumbnails with their use counts and the photos left out
   (photo_picker.js). */
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
  const cancel = document.getElementById("cancel");
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
    const cancelled = PM.cancelled(job);
    statusBadge.textContent = job.waiting_for_storage ? "waiting for storage" : cancelled ? "cancelled" : job.status;
    statusBadge.dataset.status = job.status;
    bar.style.width = `${pct}%`;
    progressbar.setAttribute("aria-valuenow", String(pct));
    percent.textContent = `${pct} %`;
    const stateText = job.waiting_for_storage ? WAITING_FOR_STORAGE : cancelled ? "cancelled." : (STATUS_TEXT[job.status] || job.status);
    progressText.textContent = `${job.slices_done.length} of ${job.slices} slices · ${stateText}`;
    document.getElementById("job-facts").textContent =
      `${PM.size(job.output_width, job.output_height)} · ${job.tiles_across} × ${job.tiles_down} tiles of ${job.tile_size} px · ` +
      (job.cell_sizes && job.cell_sizes.length > 1 ? `photos of ${job.cell_sizes.join(", ")} tiles · ` : "") +
      `library ${job.library} · ${job.slices} slice${job.slices === 1 ? "" : "s"} · ${PM.seconds(job.elapsed_seconds)}`;
    showSlices(job);
    cancel.hidden = job.status === "done" || job.status === "failed" || job.waiting_for_storage;
    if (job.status === "failed") {
      errorBox.textContent = cancelled ? "You cancelled this mosaic: delete it from My mosaics." : `The mosaic could not be made: ${job.error || "unknown error"}`;
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

  // Cancel: the job ends failed ("cancelled by its owner"), the workers drop the rest of it, and
  // it no longer counts against this browser's unfinished jobs (POST /api/jobs/<id>/cancel).
  cancel.addEventListener("click", async () => {
    if (!window.confirm("Stop making this mosaic? What is done so far is dropped.")) return;
    cancel.disabled = true;
    try {
      render(await PM.api(`${statusUrl}/cancel`, { method: "POST" }));
      if (stream) stream.close();
      await refresh();
    } catch (error) {
      errorBox.textContent = error.message;
      errorBox.hidden = false;
      await refresh();
    } finally {
      cancel.disabled = false;
    }
  });

  /* ---- the viewer: OpenSeadragon on the job's Deep Zoom pyramid, down to single tiles ---- */
  function showResult(job) {
    const card = document.getElementById("viewer-card");
    const viewport = document.getElementById("viewport");
    const level = document.getElementById("zoom-level");
    const download = document.getElementById("download");
    const downloadZip = document.getElementById("download-zip");
    const fullJpeg = job.output_width <= 65500 && job.output_height <= 65500; // libjpeg's limit (workers/imaging/stitching.py); else the zip is the full image
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
    document.getElementById("photo-picker").hidden = !window.OpenSeadragon; // beside the viewer: before its height is set
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
    const places = WhichPhoto.attach(viewer, job, statusUrl);
    PhotoPicker.attach(places, statusUrl);
    const zoomBy = (factor) => viewer.viewport.zoomBy(factor);
    document.getElementById("zoom-in").addEventListener("click", () => zoomBy(1.6));
    document.getElementById("zoom-out").addEventListener("click", () => zoomBy(1 / 1.6));
    document.getElementById("zoom-fit").addEventListener("click", () => viewer.viewport.goHome());
    document.getElementById("zoom-tile").addEventListener("click", () => {
      const item = viewer.world.getItemAt(0);
      if (item) viewer.viewport.zoomTo(item.imageToViewportZoom(tileZoom));
    });
  }

  refresh().then((job) => job && follow(job));
})();
