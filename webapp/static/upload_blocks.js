/* One file straight to Blob Storage with its SAS URL (the valet key). A file of one block (a phone
 * photo) is one Put Blob: a drop re-sends at most that block either way, and storage does half the
 * work of a Put Block and a Put Block List. A larger file is a block blob written as
 * Put Block per chunk, then Put Block List. Block ids are deterministic (the chunk's index), so a
 * retried or resumed block is the same block; a failed block is retried with backoff and only
 * blocks storage has not acknowledged are sent again; a 403 (the SAS expired) asks for a fresh URL.
 * The blocks acknowledged are remembered in localStorage (PMBlockJournal) until the commit, so the
 * same file chosen after a reload sends only the missing ones: the write-only SAS may not read
 * the block list back. Plain JS; XMLHttpRequest for Put Block because it reports bytes sent. */
"use strict";

const PMBlocks = (() => {
  const settings = {
    blockBytes: 8 * 1024 * 1024, // 8 MiB: a phone photo (3-5 MB, HEIC less) is one request
    attempts: 6, // per block: network drops, 5xx, 408, 429
    backoffMs: 500, // doubled per attempt, at most maxBackoffMs
    maxBackoffMs: 8000,
    refreshes: 2, // fresh SAS URLs asked for one file after 403s
    requestTimeoutMs: 180000, // a request storage leaves unanswered this long counts as dropped (8 MiB at 50 KB/s)
  };
  const VERSION = "2025-01-05"; // a Blob REST API version both Azure and Azurite accept
  const journal = PMBlockJournal;

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  /** Deterministic, equal-length block ids (Base64 of "block-000042"). */
  const blockId = (index) => btoa(`block-${String(index).padStart(6, "0")}`);

  /** One request to storage; resolves {status, text}; status 0 when the connection dropped. */
  function send(method, url, body, headers, onBytes) {
    return new Promise((resolve) => {
      const xhr = new XMLHttpRequest();
      xhr.open(method, url);
      xhr.timeout = settings.requestTimeoutMs;
      for (const [name, value] of Object.entries(headers)) xhr.setRequestHeader(name, value);
      if (onBytes) xhr.upload.onprogress = (e) => onBytes(e.loaded);
      xhr.onload = () => resolve({ status: xhr.status, text: xhr.responseText });
      xhr.onerror = () => resolve({ status: 0, text: "the connection dropped" });
      xhr.ontimeout = xhr.onerror;
      xhr.send(body);
    });
  }

  /** Why storage refused, from its XML error (<Code>, <Message>) or the status. */
  function reason(answer) {
    const code = /<Code>([^<]+)<\/Code>/.exec(answer.text || "");
    return answer.status ? `storage answered ${answer.status}${code ? ` ${code[1]}` : ""}` : answer.text;
  }

  const retryable = (status) => status === 0 || status === 408 || status === 429 || status >= 500;

  class UploadError extends Error {}

  /**
   * Upload `file` to `grant.url`. `refresh()` resolves a new grant for this file (after a 403);
   * `onProgress(bytes)` reports the bytes acknowledged plus those of the block in flight.
   */
  async function uploadFile(file, grant, { refresh, onProgress = () => {} }) {
    let url = grant.url;
    let refreshed = 0;
    const key = journal.key(url, file);
    const saved = journal.read(key);
    // A resumed file keeps the block size its acknowledged blocks were cut with.
    const size = saved ? saved.blockBytes : settings.blockBytes;
    const count = Math.max(1, Math.ceil(file.size / size));
    const acknowledged = new Set(saved ? saved.blocks.filter((i) => i < count) : []);
    const since = saved ? saved.since : Date.now();
    const bytesOf = (index) => Math.min(file.size, (index + 1) * size) - index * size;
    let done = 0; // bytes of acknowledged blocks
    for (const index of acknowledged) done += bytesOf(index);

    // Run `request(url)` until storage takes it: backoff on drops, a fresh URL on 403.
    async function persist(what, request) {
      for (let attempt = 1; ; attempt += 1) {
        const answer = await request(url);
        if (answer.status >= 200 && answer.status < 300) return answer;
        if (answer.status === 403 && refreshed < settings.refreshes) {
          refreshed += 1;
          const fresh = await refresh();
          if (fresh.uploaded) return null; // committed meanwhile (another tab, an earlier try)
          url = fresh.url;
          attempt = 0;
          continue;
        }
        if (!retryable(answer.status) || attempt >= settings.attempts) {
          const error = new UploadError(`${what}: ${reason(answer)}`);
          error.answer = answer;
          throw error;
        }
        const wait = Math.min(settings.maxBackoffMs, settings.backoffMs * 2 ** (attempt - 1));
        await sleep(wait * (0.75 + Math.random() * 0.5));
      }
    }

    /** Put Block for every block not acknowledged yet; false when the file was committed meanwhile. */
    async function sendBlocks() {
      onProgress(done);
      for (let index = 0; index < count; index += 1) {
        if (acknowledged.has(index)) continue;
        const start = index * size;
        const chunk = file.slice(start, Math.min(file.size, start + size));
        const blockUrl = (base) => `${base}&comp=block&blockid=${encodeURIComponent(blockId(index))}`;
        const answer = await persist(`block ${index + 1} of ${count}`, (base) =>
          send("PUT", blockUrl(base), chunk, { "x-ms-version": VERSION }, (bytes) => onProgress(done + bytes)));
        if (answer === null) return false;
        acknowledged.add(index);
        journal.write(key, { blockBytes: size, blocks: [...acknowledged], since });
        done += chunk.size;
        onProgress(done);
      }
      return true;
    }

    if (count === 1 && !saved) { // one request: nothing to journal, nothing to commit
      const headers = {
        "x-ms-version": VERSION,
        "x-ms-blob-type": "BlockBlob",
        "x-ms-blob-content-type": file.type || "application/octet-stream",
      };
      await persist("upload", (base) => send("PUT", base, file, headers, onProgress));
      onProgress(file.size);
      return undefined;
    }

    const ids = Array.from({ length: count }, (_, i) => `<Latest>${blockId(i)}</Latest>`).join("");
    const list = `<?xml version="1.0" encoding="utf-8"?><BlockList>${ids}</BlockList>`;
    const headers = {
      "x-ms-version": VERSION,
      "Content-Type": "application/xml",
      "x-ms-blob-content-type": file.type || "application/octet-stream",
    };
    const commit = () => persist("commit", (base) => send("PUT", `${base}&comp=blocklist`, list, headers));
    if (await sendBlocks()) {
      try {
        await commit();
      } catch (error) {
        // Blocks remembered from an earlier visit that storage no longer holds (discarded after
        // 7 days uncommitted, or the blob deleted meanwhile): send the whole file again, once.
        if (!saved || !/InvalidBlockList/.test((error.answer && error.answer.text) || "")) throw error;
        journal.forget(key);
        acknowledged.clear();
        done = 0;
        if (await sendBlocks()) await commit();
      }
    }
    journal.forget(key);
    onProgress(file.size);
    return undefined;
  }

  return { settings, blockId, uploadFile, UploadError };
})();
