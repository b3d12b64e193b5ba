"""A 5,000-photo library end to end: index it, render jobs with it, find a photo in them.

``python -m benchmarks library_5000 [--photos N]`` (default issue 41's 5,000; develop with
300). On a fresh ``photomosaics run`` (as ``benchmarks.libraries`` starts it: embedded
Azurite, web under gunicorn, controller, responder, indexer, one processor):

1. **Photos**: N distinct 1200 x 900 camera-like JPEGs (``benchmarks.library_photos_small``:
   a few hundred KB, EXIF-rotated and portrait ones among them, bursts of three every twenty),
   cached in ``bench-results/library-5000-photos`` (a rerun makes only the missing ones).
2. **Index**: ``photomosaics library add`` (the CLI's valet-key upload; it exits when the
   library page says indexed + skipped == staged), timed from its start: photos/s.
3. **Render**: two jobs through ``POST /api/jobs`` with that library, timed from the POST to
   ``done``, each result served (``GET .../result`` answers a JPEG): the create page's
   defaults (32 px tiles, 100 across, 4 slices), and ``use_every_photo`` on the grid the
   every-photo print plan (``GET /api/print-plan/every-photo``) names for 16 px tiles.
4. **Find a photo**: ``GET /api/jobs/<id>/photos`` for the every-photo job: a search for one
   photo's name answers that photo with its use count; the every-photo job leaves out only
   near-duplicates of a used photo; ``show=left_out`` of the defaults job
   lists photos each with a reason, as many as it says are left out; paging through all
   photos (200 a page) counts every photo of the library once. Page times are medians.
5. The web processes' and the indexer's peak RSS (``VmHWM``), with ``benchmarks.libraries``'s
   helpers; every figure beside its goal, in ``bench-results/library_5000.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import library_photos_small
from benchmarks.libraries import LIBRARY, _add, _linked, _peak_mib, _role_pids, _start_app, _stop_app

RESULTS = Path("bench-results")
CACHE = RESULTS / "library-5000-photos"
TARGET_SIZE = (1600, 1200)
DEFAULTS_JOB = {"tile_size": "32", "tiles_across": "100", "slices": "4"}  # the create page's
EVERY_TILE = 16
PAGE = 200  # the API's largest page of a job's photos
JOB_TIMEOUT = 1800.0
GOALS = {"web_mib": 200.0, "indexer_mib": 400.0, "page_ms": 1000.0}


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks library_5000")
    parser.add_argument("--photos", type=int, default=5000, help="photos in the library [5000]")
    return parser.parse_args(argv)


class _Client:
    """The web API as the CLI's client (its cookie: the library's owner)."""

    def __init__(self, url: str, client_file: Path) -> None:
        import requests

        self.url = url
        self.session = requests.Session()
        self.session.headers["X-Requested-With"] = "photomosaics"
        self.session.cookies.update(json.loads(client_file.read_text())[url])

    def get(self, path: str, **params: Any) -> Any:
        response = self.session.get(self.url + path, params=params, timeout=120)
        response.raise_for_status()
        return response

    def timed_json(self, path: str, **params: Any) -> tuple[dict[str, Any], float]:
        started = time.perf_counter()
        body = self.get(path, **params).json()
        return body, (time.perf_counter() - started) * 1000


def _run_job(client: _Client, target: bytes, form: dict[str, str]) -> dict[str, Any]:
    """POST a job, wait for it, fetch its result: the figures of one job."""
    started = time.perf_counter()
    response = client.session.post(
        client.url + "/api/jobs",
        data={"library": LIBRARY, **form},
        files={"image": ("target.jpg", target)},
        timeout=300,
    )
    if response.status_code != 202:
        return {"works": False, "error": f"POST /api/jobs: {response.status_code} {response.text[:500]}"}
    request_id = response.json()["request_id"]
    status, deadline = "", time.monotonic() + JOB_TIMEOUT
    while status not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(2)
        job = client.get(f"/api/jobs/{request_id}").json()
        status = job["status"]
    seconds = time.perf_counter() - started
    result = client.session.get(client.url + f"/api/jobs/{request_id}/result", timeout=300)
    served = result.status_code == 200 and result.content[:2] == b"\xff\xd8"
    figures = {"request_id": request_id, "status": status, "seconds": seconds, "result_bytes": len(result.content)}
    if status != "done":
        figures["error"] = json.dumps(job.get("error") or job.get("events", [])[-3:])[:2000]
    return {**figures, "works": status == "done" and served, "grid": [job.get("tiles_across"), job.get("tiles_down")]}


def _every_photo_form(client: _Client) -> tuple[dict[str, str], dict[str, Any]]:
    plan, _ = client.timed_json(
        "/api/print-plan/every-photo",
        library=LIBRARY,
        tile_size=EVERY_TILE,
        width=TARGET_SIZE[0],
        height=TARGET_SIZE[1],
    )
    form = {"tile_size": str(EVERY_TILE), "tiles_across": str(plan["tiles_across"]), "slices": "4"}
    return {**form, "use_every_photo": "true"}, plan


def _find_photo(client: _Client, request_id: str, name: str) -> dict[str, Any]:
    """Search for ``name``: the answer holds it, with its use count."""
    body, ms = client.timed_json(f"/api/jobs/{request_id}/photos", search=name.removesuffix(".jpg"))
    found = [p for p in body["photos"] if p["name"] == name]
    uses = found[0]["uses"] if found else None
    return {"name": name, "answers": body["count"], "uses": uses, "ms": ms, "works": bool(found) and uses is not None}


def _left_out(client: _Client, request_id: str) -> dict[str, Any]:
    """Every left-out photo, paged: each has a reason, and there are as many as the job says."""
    rows, times, offset, first = [], [], 0, None
    while offset is not None:
        body, ms = client.timed_json(f"/api/jobs/{request_id}/photos", show="left_out", offset=offset, limit=PAGE)
        first = first or body
        rows += body["photos"]
        times.append(ms)
        offset = body["next_offset"]
    kinds: dict[str, int] = {}  # the reasons with the photos' names taken out, counted
    for row in rows:
        kind = re.sub(r"\S+\.jpg", "…", row["reason"] or "none")
        kinds[kind] = kinds.get(kind, 0) + 1
    works = len(rows) == first["left_out"] and all(p["reason"] and p["uses"] == 0 for p in rows)
    return {"count": len(rows), "said": first["left_out"], "reasons": kinds, "page_ms": times, "works": works}


def _page_all(client: _Client, request_id: str) -> dict[str, Any]:
    """Every photo of the job's library, 200 a page in name order: each once."""
    names, times, offset, total = [], [], 0, None
    while offset is not None:
        body, ms = client.timed_json(
            f"/api/jobs/{request_id}/photos", show="all", sort="name", offset=offset, limit=PAGE
        )
        total = body["photos_total"]
        names += [p["name"] for p in body["photos"]]
        times.append(ms)
        offset = body["next_offset"]
    return {"pages": len(times), "photos": len(names), "distinct": len(set(names)), "total": total, "page_ms": times}


def _library_page(client: _Client) -> dict[str, Any]:
    """The library's own photos page (its progress and 100 photos), as the libraries page polls it."""
    times, body = [], {}
    for _ in range(5):
        body, ms = client.timed_json(f"/api/libraries/{LIBRARY}/photos", limit=100)
        times.append(ms)
    return {"progress": body["progress"], "ms": statistics.median(times)}


def _progress(result: dict[str, Any]) -> None:
    """The figures so far, saved: a long run stopped later still leaves them."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "library_5000.json").write_text(json.dumps(result, indent=1))


def measure(photos: int) -> dict[str, Any]:
    from benchmarks.photos import target_jpeg

    print(f"photos: {photos} of 1200 x 900 in {CACHE} (made when missing) ...", flush=True)
    started = time.perf_counter()
    paths = library_photos_small.ensure(CACHE, photos)
    result: dict[str, Any] = {"photos": photos, "made_seconds": time.perf_counter() - started}
    result["megabytes"] = sum(p.stat().st_size for p in paths) / 1e6
    target = target_jpeg("chelsea", TARGET_SIZE)
    with tempfile.TemporaryDirectory(prefix="bench-library-5000-", dir=RESULTS) as tmp_name:
        tmp = Path(tmp_name)
        upload = _linked(tmp / "photos", paths)
        print("starting the app (photomosaics run) ...", flush=True)
        app, url, log = _start_app(tmp)
        try:
            indexer = _role_pids(app.pid, "indexer")[0]
            print(f"library add: {photos} photos, {result['megabytes']:.0f} MB ...", flush=True)
            try:
                seconds, said = _add(url, upload, tmp / "clients.json")
                result["index"] = {"works": True, "seconds": seconds, "cli": said}
            except RuntimeError as exc:
                result["index"] = {"works": False, "error": str(exc)[-3000:]}
                return result
            client = _Client(url, tmp / "clients.json")
            result["library_page"] = _library_page(client)
            progress = result["library_page"]["progress"]
            result["index"].update(indexed=progress["indexed"], skipped=progress["skipped"], groups=progress["groups"])
            result["index"]["works"] = progress["indexed"] + progress["skipped"] == photos and progress["pending"] == 0
            _progress(result)
            print("job with the defaults ...", flush=True)
            result["defaults_job"] = _run_job(client, target, DEFAULTS_JOB)
            _progress(result)
            print("job with use_every_photo ...", flush=True)
            form, result["every_photo_plan"] = _every_photo_form(client)
            result["every_photo_job"] = _run_job(client, target, form)
            _progress(result)
            if result["every_photo_job"]["works"]:
                every = result["every_photo_job"]["request_id"]
                result["find"] = _find_photo(client, every, paths[len(paths) // 2].name)
                result["every_photo_left_out"] = _left_out(client, every)
                result["all_pages"] = _page_all(client, every)
                used = client.get(f"/api/jobs/{every}/photos", limit=1).json()
                result["every_photo_job"]["used"], result["every_photo_job"]["left_out"] = (
                    used["used"],
                    used["left_out"],
                )
            if result["defaults_job"]["works"]:
                result["left_out"] = _left_out(client, result["defaults_job"]["request_id"])
            result["web_peak_mib"] = {str(p): _peak_mib(p) for p in _role_pids(app.pid, "web")}
            result["indexer_peak_mib"] = _peak_mib(indexer)
        finally:
            _stop_app(app)
            result["log_tail"] = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
    return result


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _works(step: dict[str, Any] | None) -> str:
    return "yes" if step and step.get("works") else "**no**"


def report(result: dict[str, Any]) -> None:
    n = result["photos"]
    index = result["index"]
    print(f"\nlibrary of {n:,} photos (1200 x 900 JPEG, {result['megabytes']:.0f} MB), CLI `library add`:")
    print("| step | works | figure | goal |")
    print("|---|---|---|---|")
    if not index["works"]:
        print(f"| index | **no** | {index.get('error', index)} | all indexed |")
        return
    print(
        f"| index: first byte -> library ready | yes | {index['seconds']:.0f} s ({n / index['seconds']:.2f} photos/s); "
        f"{index['indexed']:,} indexed, {index['skipped']:,} skipped, {index['groups']:,} groups | all indexed or skipped |"
    )
    for key, label in (
        ("defaults_job", "job, the create page's defaults"),
        ("every_photo_job", "job, use every photo"),
    ):
        job = result.get(key)
        if job is None:
            continue
        if "seconds" not in job:
            print(f"| {label} | **no** | {job.get('error')} | done, result served |")
            continue
        grid = "x".join(str(v) for v in job.get("grid", []))
        extra = f"; {job['used']:,} photos used, {job['left_out']:,} left out" if "used" in job else ""
        figure = (
            f"{job['seconds']:.0f} s to done, {grid} tiles, result {job.get('result_bytes', 0) / 1e3:,.0f} kB{extra}"
        )
        print(f"| {label} | {_works(job)} | {job.get('error', figure)} | done, result served |")
    plan = result.get("every_photo_plan")
    if plan:
        print(
            f"| every-photo print plan | yes | {plan['photos']:,} photos -> {plan['tiles_across']} across at {EVERY_TILE} px | |"
        )
    every_left = result.get("every_photo_left_out")
    if every_left:
        groups_only = every_left["works"] and all("group" in kind for kind in every_left["reasons"])
        print(
            f"| use every photo: the photos left out are only near-duplicates of a used one | "
            f"{'yes' if groups_only else '**no**'} | {every_left['count']:,} left out: "
            + "; ".join(f"{c:,} x '{k}'" for k, c in every_left["reasons"].items())
            + " | every group placed |"
        )
    find = result.get("find")
    if find:
        print(
            f"| find a photo by name ({find['name']}) | {_works(find)} | used {find['uses']} times, "
            f"{find['answers']} answer(s), {find['ms']:.0f} ms | found, with its use count |"
        )
    left = result.get("left_out")
    if left:
        kinds = "; ".join(f"{c:,} x '{k}'" for k, c in left["reasons"].items())
        print(
            f"| left out, with reasons (defaults job) | {_works(left)} | {left['count']:,} of {left['said']:,} said, "
            f"median page {statistics.median(left['page_ms']):.0f} ms; {kinds} | each with a reason |"
        )
    pages = result.get("all_pages")
    if pages:
        ok = pages["photos"] == pages["distinct"] == pages["total"]
        page_ms = statistics.median(pages["page_ms"])
        print(
            f"| page through all photos ({PAGE} a page) | {'yes' if ok else '**no**'} | {pages['photos']:,} in "
            f"{pages['pages']} pages ({pages['distinct']:,} distinct, {pages['total']:,} total); median page {page_ms:.0f} ms, "
            f"slowest {max(pages['page_ms']):.0f} ms | every photo once; page <= {GOALS['page_ms']:.0f} ms |"
        )
    if "library_page" in result:
        print(
            f"| the library's photos page (100 photos + progress) | yes | median {result['library_page']['ms']:.0f} ms | |"
        )
    if "web_peak_mib" in result:
        web = max(result["web_peak_mib"].values(), default=0.0)
        print(
            f"| web peak RSS (largest process) | | {web:.0f} MiB | <= {GOALS['web_mib']:.0f} MB: {_verdict(web <= GOALS['web_mib'])} |"
        )
        idx = result["indexer_peak_mib"]
        print(
            f"| indexer peak RSS | | {idx:.0f} MiB | <= {GOALS['indexer_mib']:.0f} MB: {_verdict(idx <= GOALS['indexer_mib'])} |"
        )
    steps = [result.get(k) for k in ("index", "defaults_job", "every_photo_job", "find", "left_out")]
    print(
        f"\nend to end (index, render, find a photo): {'works' if all(s and s.get('works') for s in steps) else '**fails**'}"
    )


def main(argv: list[str] | None = None) -> int:
    args = _args(argv if argv is not None else [])
    result = measure(args.photos)
    _progress(result)
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
