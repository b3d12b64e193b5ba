/* A person's photos into their library: the chosen files or folders (a folder input, or files and
 * folders dropped, walked with webkitGetAsEntry), obvious non-photos left out, upload URLs asked
 * for 500 files at a time (POST /api/libraries/<name>/uploads), files the grant calls uploaded
 * skipped, the rest written straight to storage four at a time (PMBlocks), and indexing asked
 * for (POST .../index) for each 32 photos in storage, so that it runs while the rest upload.
 * The same folder chosen again after a reload skips what is uploaded. */
"use strict";

const PMUploads = (() => {
  const settings = {
    grantBatch: 500, // the API's most files per request
    atOnce: 4, // files in flight: enough to fill a home uplink, gentle on a phone
    indexEvery: 32, // photos per index request: the indexer starts while the rest upload
  };
  const PHOTO_TYPES = new Set(["jpg", "jpeg", "png", "webp", "heic", "heif", "avif", "gif", "bmp", "tif", "tiff"]);

  const extension = (path) => (/\.([^./]+)$/.exec(path) || [, ""])[1].toLowerCase();

  /** The files under a dropped entry (a file, or a folder read to its end), with their paths. */
  async function walk(entry, out) {
    if (entry.isFile) {
      const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
      out.push({ file, path: entry.fullPath.replace(/^\/+/, "") });
      return;
    }
    if (!entry.isDirectory) return;
    const reader = entry.createReader();
    for (;;) { // readEntries answers at most 100 entries a call: read until it answers none
      const entries = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
      if (!entries.length) return;
      for (const child of entries) await walk(child, out);
    }
  }

  /** What was dropped: folders walked; plain files when the browser has no entries. */
  async function dropped(dataTransfer) {
    const entries = [...(dataTransfer.items || [])].map((item) => item.webkitGetAsEntry && item.webkitGetAsEntry()).filter(Boolean);
    if (!entries.length) return chosen(dataTransfer.files);
    const out = [];
    for (const entry of entries) await walk(entry, out);
    return out;
  }

  /** What an input chose: a folder's files carry their path under it. */
  const chosen = (fileList) => [...fileList].map((file) => ({ file, path: file.webkitRelativePath || file.name }));

  /**
   * Photos and what was left out with why. Names are paths under the chosen folder (its own name
   * dropped), so a folder chosen by the input or dropped, here or with `photomosaics library add`,
   * gives the same names, and the same blobs.
   */
  function sort(items) {
    const tops = new Set(items.map(({ path }) => (path.includes("/") ? path.split("/")[0] : "")));
    const strip = tops.size === 1 && !tops.has("");
    const photos = [];
    const leftOut = [];
    for (const { file, path } of items) {
      const name = strip ? path.slice(path.indexOf("/") + 1) : path;
      const base = name.split("/").pop();
      if (name.split("/").some((part) => part.startsWith("."))) leftOut.push({ name, why: "hidden file" });
      else if (!PHOTO_TYPES.has(extension(base))) { // by extension, as `library add`: an image/* type (.svg, .jp2) is not enough
        leftOut.push({ name, why: `not a photo (${extension(base) ? `.${extension(base)}` : "no extension"})` });
      } else if (!file.size) leftOut.push({ name, why: "empty file" });
      else photos.push({ file, name });
    }
    photos.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return { photos, leftOut };
  }

  /** "3 files left out: not a photo (.txt) × 2, hidden file." (the same words as `library add`) */
  function leftOutNote(leftOut) {
    if (!leftOut.length) return "";
    const counts = {};
    for (const { why } of leftOut) counts[why] = (counts[why] || 0) + 1;
    const parts = Object.entries(counts).map(([why, n]) => (n === 1 ? why : `${why} × ${PM.number(n)}`));
    return `${PM.number(leftOut.length)} file${leftOut.length === 1 ? "" : "s"} left out: ${parts.join(", ")}.`;
  }

  /**
   * Upload `photos` ({file, name}) into `library`. `hooks.file(name, state, sent, size)` follows
   * each file (queued, uploading, uploaded, skipped, refused, failed); `hooks.total(sent, bytes)`
   * the whole. Resolves {uploaded, skipped, resent, refused: [{name, reason}], failed: [{name, reason}],
   * index} (resent: photos not in storage after their upload, sent again; index: the last index
   * answer, its `queued` counting every request's).
   */
  async function upload(library, description, photos, hooks) {
    const grantsUrl = `/api/libraries/${encodeURIComponent(library)}/uploads`;
    const result = { uploaded: 0, skipped: 0, resent: 0, refused: [], failed: [], created: false, index: null };
    const total = photos.reduce((sum, p) => sum + p.file.size, 0);
    let sent = 0;
    const ask = (files) => PM.api(grantsUrl, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ description: description || undefined, files: files.map((p) => ({ name: p.name, size: p.file.size })) }),
    });
    const indexUrl = `/api/libraries/${encodeURIComponent(library)}/index`;
    let ready = []; // in storage, not yet asked to be indexed
    let queued = 0; // photos the index requests queued, over all of them
    const askIndex = async (names) => {
      const answer = await PM.api(indexUrl, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ photos: names }),
      });
      queued += answer.queued;
      return answer;
    };
    const indexed = []; // index requests in flight; the last one's answer counts the library
    let missed = false; // one failed: the last request asks for every photo not indexed yet
    const isReady = (name) => {
      ready.push(name);
      if (ready.length >= settings.indexEvery) {
        indexed.push(askIndex(ready).catch(() => { missed = true; }));
        ready = [];
      }
    };
    hooks.total(0, total);
    for (const photo of photos) hooks.file(photo.name, "queued", 0, photo.file.size);

    const sentNow = new Map(); // name -> null (in storage) or the reason its upload failed
    const send = async ([photo, grant]) => {
      let mine = 0;
      const progress = (bytes) => {
        sent += bytes - mine;
        mine = bytes;
        hooks.file(photo.name, "uploading", bytes, photo.file.size);
        hooks.total(sent, total);
      };
      const refresh = async () => (await ask([photo])).uploads[0];
      try {
        await PMBlocks.uploadFile(photo.file, grant, { refresh, onProgress: progress });
        sentNow.set(photo.name, null);
        hooks.file(photo.name, "uploaded", photo.file.size, photo.file.size);
        isReady(photo.name);
      } catch (error) {
        progress(photo.file.size); // the bar moves past it either way
        sentNow.set(photo.name, error.message);
        hooks.file(photo.name, "failed", 0, photo.file.size, error.message);
      }
    };

    for (let start = 0; start < photos.length; start += settings.grantBatch) {
      const batch = photos.slice(start, start + settings.grantBatch);
      const byName = new Map(batch.map((p) => [p.name, p]));
      const answer = await ask(batch);
      result.created = result.created || answer.created;
      for (const { name, reason } of answer.refused) {
        result.refused.push({ name, reason });
        hooks.file(name, "refused", 0, 0, reason);
        sent += byName.has(name) ? byName.get(name).file.size : 0;
      }
      const work = [];
      for (const grant of answer.uploads) {
        const photo = byName.get(grant.name);
        if (grant.uploaded) {
          PMBlockJournal.forget(PMBlockJournal.key(grant.url, photo.file)); // committed: nothing to resume
          result.skipped += 1;
          sent += photo.file.size;
          hooks.file(photo.name, "skipped", photo.file.size, photo.file.size);
          isReady(photo.name); // uploaded before, perhaps never indexed
        } else work.push([photo, grant]);
      }
      hooks.total(sent, total);
      await pool(work, send);
    }
    // Still there? Storage may lose what it acknowledged (the embedded Azurite saves its index a
    // few seconds after it answers: killed then, it forgets the last photos), and a failed upload
    // deserves a second try: the grants say which are not in storage, and those are sent again.
    const again = photos.filter((p) => sentNow.has(p.name));
    for (let start = 0; start < again.length; start += settings.grantBatch) {
      const batch = again.slice(start, start + settings.grantBatch);
      const byName = new Map(batch.map((p) => [p.name, p]));
      const missing = (await ask(batch)).uploads.filter((grant) => !grant.uploaded);
      result.resent += missing.length;
      for (const grant of missing) sent -= byName.get(grant.name).file.size; // counted again as it goes
      await pool(missing.map((grant) => [byName.get(grant.name), grant]), send);
    }
    for (const [name, reason] of sentNow) {
      if (reason === null) result.uploaded += 1;
      else result.failed.push({ name, reason });
    }
    await Promise.all(indexed);
    const last = await (missed ? PM.api(indexUrl, { method: "POST" }) : askIndex(ready));
    result.index = { ...last, queued: missed ? last.queued : queued };
    return result;
  }

  /** Run `task` over `items`, `settings.atOnce` at a time. */
  async function pool(items, task) {
    let next = 0;
    const worker = async () => {
      while (next < items.length) await task(items[(next += 1) - 1]);
    };
    await Promise.all(Array.from({ length: Math.min(settings.atOnce, items.length) }, worker));
  }

  return { settings, dropped, chosen, sort, leftOutNote, upload };
})();
