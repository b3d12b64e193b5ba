/* The job page: live progress over Server-Sent Events, each finished slice shown in place,
   then the mosaic in a zoom-and-pan viewer (wheel, pinch, drag, buttons) with a download. */
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
  // Submitted while the primary storage account was down: kept on the paired secondary (dal.failover).
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

  function follow(job) {
    if (!window.EventSource || job.status === "done" || job.status === "failed") return;
    stream = new EventSource(job.events_url);
    stream.addEventListener("job", (e) => render(JSON.parse(e.data)));
    stream.addEventListener("end", () => { stream.close(); refresh(); });
    stream.onerror = () => {
      // The browser reconnects by itself; if the job is finished meanwhile, stop.
      if (stream.readyState === EventSource.CLOSED) setTimeout(() => refresh().then((j) => j && follow(j)), 2000);
    };
  }

  /* ---- the viewer: CSS transform of the full-resolution image ---- */
  function showResult(job) {
    const card = document.getElementById("viewer-card");
    const viewport = document.getElementById("viewport");
    const img = document.getElementById("mosaic");
    const level = document.getElementById("zoom-level");
    document.getElementById("download").href = `${job.result_url}?download=1`;
    stage.hidden = true;
    document.getElementById("progress-card").classList.add("finished");
    card.hidden = false;
    let scale = 1, x = 0, y = 0, fit = 1;
    const maxScale = () => Math.max(4, 240 / job.tile_size);

    function apply() {
      img.style.transform = `translate(${x}px, ${y}px) scale(${scale})`;
      img.classList.toggle("pixels", scale >= 1.5);
      level.textContent = `${Math.round(scale * 100)} %`;
    }
    function clamp() {
      const w = img.naturalWidth * scale, h = img.naturalHeight * scale;
      const vw = viewport.clientWidth, vh = viewport.clientHeight;
      x = w <= vw ? (vw - w) / 2 : Math.min(0, Math.max(vw - w, x));
      y = h <= vh ? (vh - h) / 2 : Math.min(0, Math.max(vh - h, y));
    }
    function zoomAt(factor, cx, cy) {
      const next = Math.min(maxScale(), Math.max(fit, scale * factor));
      x = cx - ((cx - x) * next) / scale;
      y = cy - ((cy - y) * next) / scale;
      scale = next;
      clamp();
      apply();
    }
    function sizeViewport() {
      // As tall as the picture needs at this width, within 240 px .. 75 % of the window.
      const wanted = (viewport.clientWidth * img.naturalHeight) / img.naturalWidth;
      viewport.style.height = `${Math.round(Math.max(240, Math.min(window.innerHeight * 0.75, wanted)))}px`;
    }
    function fitToView() {
      sizeViewport();
      fit = Math.min(viewport.clientWidth / img.naturalWidth, viewport.clientHeight / img.naturalHeight);
      scale = fit;
      clamp();
      apply();
    }
    function onResize() {
      if (!img.naturalWidth) return;
      const atFit = Math.abs(scale - fit) < 1e-6;
      sizeViewport();
      fit = Math.min(viewport.clientWidth / img.naturalWidth, viewport.clientHeight / img.naturalHeight);
      if (atFit || scale < fit) scale = fit;
      clamp();
      apply();
    }
    const centre = () => [viewport.clientWidth / 2, viewport.clientHeight / 2];

    img.addEventListener("load", fitToView);
    img.src = job.result_url;
    window.addEventListener("resize", onResize);

    viewport.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = viewport.getBoundingClientRect();
      zoomAt(Math.exp(-e.deltaY * 0.0015), e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    viewport.addEventListener("dblclick", (e) => {
      const r = viewport.getBoundingClientRect();
      zoomAt(2, e.clientX - r.left, e.clientY - r.top);
    });

    const pointers = new Map();
    let pinch = null;
    viewport.addEventListener("pointerdown", (e) => {
      viewport.setPointerCapture(e.pointerId);
      pointers.set(e.pointerId, [e.clientX, e.clientY]);
      viewport.classList.add("dragging");
    });
    viewport.addEventListener("pointermove", (e) => {
      if (!pointers.has(e.pointerId)) return;
      const [px, py] = pointers.get(e.pointerId);
      pointers.set(e.pointerId, [e.clientX, e.clientY]);
      if (pointers.size === 1) {
        x += e.clientX - px;
        y += e.clientY - py;
        clamp();
        apply();
      } else if (pointers.size === 2) {
        const [[ax, ay], [bx, by]] = [...pointers.values()];
        const distance = Math.hypot(ax - bx, ay - by);
        const r = viewport.getBoundingClientRect();
        if (pinch) zoomAt(distance / pinch, (ax + bx) / 2 - r.left, (ay + by) / 2 - r.top);
        pinch = distance;
      }
    });
    const release = (e) => {
      pointers.delete(e.pointerId);
      if (pointers.size < 2) pinch = null;
      if (!pointers.size) viewport.classList.remove("dragging");
    };
    viewport.addEventListener("pointerup", release);
    viewport.addEventListener("pointercancel", release);

    document.getElementById("zoom-in").addEventListener("click", () => zoomAt(1.6, ...centre()));
    document.getElementById("zoom-out").addEventListener("click", () => zoomAt(1 / 1.6, ...centre()));
    document.getElementById("zoom-fit").addEventListener("click", fitToView);
    // One tile fills about 120 screen pixels: the individual photos are plain to see.
    document.getElementById("zoom-tile").addEventListener("click", () => zoomAt(Math.min(maxScale(), 120 / job.tile_size) / scale, ...centre()));
    viewport.addEventListener("keydown", (e) => {
      const step = 60;
      if (e.key === "+" || e.key === "=") zoomAt(1.4, ...centre());
      else if (e.key === "-") zoomAt(1 / 1.4, ...centre());
      else if (e.key === "ArrowLeft") x += step;
      else if (e.key === "ArrowRight") x -= step;
      else if (e.key === "ArrowUp") y += step;
      else if (e.key === "ArrowDown") y -= step;
      else return;
      e.preventDefault();
      clamp();
      apply();
    });
  }

  refresh().then((job) => job && follow(job));
})();
