/* Which blocks of a half-uploaded file storage acknowledged, kept in localStorage so that a reload
 * does not send them again. The upload URL's SAS is write-only: it may not read the block list
 * back (Get Block List), so the browser remembers it. One entry per staged blob (the URL's path:
 * account, library container, photo) and file (name, size, lastModified); written after every
 * acknowledged block, forgotten once the blob is committed. Azure discards uncommitted blocks
 * after 7 days, so older entries are dropped (and a commit that finds a block missing makes
 * PMBlocks send the whole file again). Storage unavailable (a private window, a full quota): no
 * entry, and a reload sends the file whole, as before. */
"use strict";

const PMBlockJournal = (() => {
  const PREFIX = "pm-blocks:";
  const KEEP_MS = 6 * 24 * 3600 * 1000; // a day short of storage's 7: never trust a block it may have dropped

  function store() {
    try {
      return window.localStorage;
    } catch (error) {
      return null; // blocked by the browser's settings
    }
  }

  /** The entry's key for `file` written to the blob of `url` (its query, the SAS, left out). */
  function key(url, file) {
    const path = new URL(url, window.location.href).pathname;
    return `${PREFIX}${path}|${file.name}|${file.size}|${file.lastModified}`;
  }

  /** {blockBytes, blocks: [index...], since} or null (none, unreadable, or too old). */
  function read(name) {
    const local = store();
    if (!local) return null;
    try {
      const entry = JSON.parse(local.getItem(name) || "null");
      const valid = entry && Number.isInteger(entry.blockBytes) && entry.blockBytes > 0
        && Array.isArray(entry.blocks) && entry.blocks.every(Number.isInteger) && Date.now() - entry.since < KEEP_MS;
      if (!valid && entry) local.removeItem(name);
      return valid ? entry : null;
    } catch (error) {
      return null;
    }
  }

  function write(name, entry) {
    const local = store();
    try {
      if (local) local.setItem(name, JSON.stringify(entry));
    } catch (error) {
      // quota full: this file resumes from its start after a reload
    }
  }

  function forget(name) {
    const local = store();
    if (local) local.removeItem(name);
  }

  /** Drop every entry too old to trust (at page load). */
  function prune() {
    const local = store();
    if (!local) return;
    const names = [];
    for (let i = 0; i < local.length; i += 1) if ((local.key(i) || "").startsWith(PREFIX)) names.push(local.key(i));
    names.forEach(read);
  }

  prune();
  return { key, read, write, forget, prune, PREFIX };
})();
