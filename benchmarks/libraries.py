"""A person's library: 1,000 phone photos uploaded with the CLI, indexed by the indexer role.

``python -m benchmarks libraries [--photos N] [--added M] [--faces F]`` (defaults: issue 41's
1,000, 100 and 60). Steps, each figure printed beside its goal:

1. **Photos**: N camera-like 12 MP JPEGs (``benchmarks.camera_photos``: 3-5 MB, EXIF orientations
   6/8/3, portraits, bursts) and one 100 MP photo, cached in ``bench-results/library-photos``
   (a rerun makes only the missing ones), plus M more for step 3.
2. **The whole app as ``make run`` starts it**: ``photomosaics run`` on a fresh data folder
   (embedded Azurite, web app, controller, responder, indexer, one processor). Then
   ``photomosaics library add bench NAME FOLDER`` (the valet-key flow: the CLI writes straight
   to Blob Storage, the indexer indexes) is timed from its start (its first request; the first
   photo byte follows at once) to its exit, which is when the library page's progress says every
   staged photo is indexed or skipped (the CLI polls it every second). Figures: photos/s, the
   indexer's CPU per photo (``/proc/<pid>/stat``, all of its threads, idle polling included),
   beside a plain full decode + EXIF turn + resize of a sample of the same photos in this
   process; the peak RSS (``VmHWM``) of the web processes (gunicorn's master and workers) and
   of the indexer.
3. **Adding M photos decodes M**: the same CLI on a folder with the N photos and M new ones;
   the photos the indexer handled after it (its ``indexer.batch`` log lines) must be M.
4. **Faces** near the edge (``benchmarks.face_crops``).
5. **Use every photo** on a library of ``--every`` small photos and a grid of 1,200 cells
   (``benchmarks.library_every_photo``); ``--every 0`` leaves it out.

6. **The browser's upload flow** on the same photos (``benchmarks.browser_upload``), when the
   libraries page has it; the peak RSS figures then cover both uploads.

Results go to ``bench-results/libraries.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import browser_upload, camera_photos

RESULTS = Path("bench-results")
CACHE = RESULTS / "library-photos"
LIBRARY = "bench-photos"
BASELINE_SAMPLE = 40  # photos of the plain full-decode baseline (evenly spread over the N)
GOALS = {"seconds_per_1000": 180.0, "cpu_ratio": 5.0, "web_mib": 200.0, "indexer_mib": 400.0, "faces": 0.95}
TICK = os.sysconf("SC_CLK_TCK")


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks libraries")
    parser.add_argument("--photos", type=int, default=1000, help="12 MP photos in the library [1000]")
    parser.add_argument("--added", type=int, default=100, help="photos added to it afterwards [100]")
    parser.add_argument("--faces", type=int, default=60, help="photos of the face-crop check [60]")
    parser.add_argument("--every", type=int, default=1000, help="library of the use-every-photo check [1000]")
    return parser.parse_args(argv)


# -- the app's processes ------------------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == pid]
        found += kids
        frontier += kids
    return found


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _role_pids(run_pid: int, role: str) -> list[int]:
    """The ``photomosaics <role>`` processes under ``run`` and their own children (gunicorn's workers)."""
    mains = [p for p in _descendants(run_pid) if _role_of(p) == role]
    return sorted({*mains, *(c for p in mains for c in _descendants(p))})


def _role_of(pid: int) -> str | None:
    argv = _argv(pid)  # the console script's or `python -c "from photomosaics.cli import main; main()"`'s
    for i, arg in enumerate(argv[:-1]):
        if arg.endswith("photomosaics") or "photomosaics.cli" in arg:
            return argv[i + 1]
    return None


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime, every thread


def _peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_app(folder: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = _free_port()
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "PHOTOMOSAICS_LOG_LEVEL": "INFO"}
    env.pop("AZURE_STORAGE_CONNECTION_STRING", None)  # the embedded Azurite, as make run
    log = folder / "run.log"
    argv = [sys.executable, "-c", "from photomosaics.cli import main; main()", "run"]
    argv += ["--data-dir", str(folder / "data"), "--port", str(port), "--processors", "1", "--grace", "5"]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"photomosaics run exited {process.returncode}; see {log}")
        try:
            urllib.request.urlopen(url + "/healthz", timeout=5).close()
            if _role_pids(process.pid, "indexer"):
                return process, url, log
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"the app did not answer at {url} within 600 s; see {log}")


def _stop_app(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _batches(log: Path) -> list[dict[str, str]]:
    """The indexer's ``indexer.batch`` log lines, as key=value dicts."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if "indexer.batch" in line]
    return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in lines]


def _add(url: str, folder: Path, client_file: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env["PHOTOMOSAICS_CLIENT_FILE"] = str(client_file)
    argv = [sys.executable, "-c", "from photomosaics.cli import main; main()", "library", "add", LIBRARY, str(folder)]
    started = time.perf_counter()
    done = subprocess.run([*argv, "--url", url, "--timeout", "3600"], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"library add exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}")
    return seconds, done.stdout.strip()


def _linked(folder: Path, paths: list[Path]) -> Path:
    """A folder of the photos as hard links (the cache's file system), else symbolic links."""
    folder.mkdir(parents=True)
    for path in paths:
        try:
            os.link(path, folder / path.name)
        except OSError:
            (folder / path.name).symlink_to(path.resolve())
    return folder


def _progress(result: dict[str, Any], step: str) -> None:
    """The figures so far, printed and saved: a long run stopped later still leaves them."""
    print(f"  {step}: " + json.dumps({k: v for k, v in result.items() if k != "cli"}), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "libraries.json").write_text(json.dumps(result, indent=1))


# -- the baseline -----------------------------------------------------------------------------------


def full_decode_ms(paths: list[Path]) -> float:
    """CPU ms per photo of a plain full decode, EXIF turn and resize to the indexer's work size."""
    import io

    from PIL import Image, ImageOps

    from mosaic.photo_index import WORK_SIDE

    started = time.process_time()
    for path in paths:
        with Image.open(io.BytesIO(path.read_bytes())) as image:
            upright = ImageOps.exif_transpose(image.convert("RGB"))
            scale = WORK_SIDE / min(upright.size)
            upright.resize((round(upright.width * scale), round(upright.height * scale)), Image.Resampling.LANCZOS)
    return (time.process_time() - started) * 1000 / max(1, len(paths))


def index_photo_ms(paths: list[Path]) -> float:
    """CPU ms per photo of the indexer's own work on them (``index_photo``: reduced decode, EXIF
    turn, faces, crop, hash), in this process: the part of its CPU that storage and the queue do not add."""
    from mosaic.photo_index import index_photo

    started = time.process_time()
    for path in paths:
        index_photo(path.read_bytes())
    return (time.process_time() - started) * 1000 / max(1, len(paths))


def reduced_decode_ms(paths: list[Path]) -> float:
    """CPU ms per photo of libjpeg's reduced decode alone (1/8 DCT scaling, Pillow's ``draft``):
    the floor of any indexer that reads every photo's bytes. Its entropy decoding still reads
    every coefficient of the file, so it costs about half of a full decode, not an eighth."""
    import io

    from PIL import Image

    started = time.process_time()
    for path in paths:
        with Image.open(io.BytesIO(path.read_bytes())) as image:
            image.draft("RGB", (image.width // 8, image.height // 8))
            image.load()
    return (time.process_time() - started) * 1000 / max(1, len(paths))


# -- the run ----------------------------------------------------------------------------------------


def measure(photos: int, added: int) -> dict[str, Any]:
    print(f"photos: {photos} + {added} of 12 MP and one of 100 MP in {CACHE} (made when missing) ...", flush=True)
    started = time.perf_counter()
    paths = camera_photos.ensure(CACHE, photos + added)
    giant = paths.pop()
    first, later = paths[:photos], paths[photos:]
    print(f"  ready in {time.perf_counter() - started:.0f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-libraries-", dir=CACHE.parent) as tmp_name:
        tmp = Path(tmp_name)
        upload = _linked(tmp / "photos", [*first, giant])
        gigabytes = sum(p.stat().st_size for p in upload.iterdir()) / 1e9
        print("starting the app (photomosaics run) ...", flush=True)
        app, url, log = _start_app(tmp)
        try:
            indexer = _role_pids(app.pid, "indexer")[0]
            web = _role_pids(app.pid, "web")
            cpu_before = _cpu_seconds(indexer)
            print(f"library add: {len(first) + 1} photos, {gigabytes:.2f} GB ...", flush=True)
            seconds, said = _add(url, upload, tmp / "clients.json")
            indexer_cpu = _cpu_seconds(indexer) - cpu_before
            handled = _batches(log)
            result: dict[str, Any] = {
                "photos": len(first) + 1,
                "gigabytes": gigabytes,
                "seconds": seconds,
                "cli": said,
                "indexer_cpu_ms_per_photo": indexer_cpu * 1000 / (len(first) + 1),
                "indexed": sum(int(b.get("indexed", 0)) for b in handled),
                "skipped": sum(int(b.get("skipped", 0)) for b in handled),
                "web_peak_mib": {str(p): _peak_mib(p) for p in web},
                "indexer_peak_mib": _peak_mib(indexer),
            }
            _progress(result, "library add")
            more = _linked(tmp / "more", [*first, giant, *later])
            print(f"library add: the same folder and {len(later)} new photos ...", flush=True)
            result["added_seconds"], _ = _add(url, more, tmp / "clients.json")
            result["added_decoded"] = sum(int(b.get("photos", 0)) for b in _batches(log)[len(handled) :])
            result["added"] = len(later)
            _progress(result, "added")
            print("browser: the libraries page uploads the same photos (headless Chromium) ...", flush=True)
            result["browser_seconds"] = browser_upload.seconds(url, LIBRARY + "-browser", upload, tmp / "chromium")
            result["indexer_peak_mib"] = _peak_mib(indexer)
            result["web_peak_mib"] = {str(p): _peak_mib(p) for p in _role_pids(app.pid, "web")}
        finally:
            _stop_app(app)
    sample = first[:: max(1, len(first) // BASELINE_SAMPLE)][:BASELINE_SAMPLE]
    print(f"baseline: full decode + resize of {len(sample)} of the same photos ...", flush=True)
    result["full_decode_ms_per_photo"] = full_decode_ms(sample)
    result["index_photo_ms_per_photo"] = index_photo_ms(sample)  # side by side, after the baseline
    result["reduced_decode_ms_per_photo"] = reduced_decode_ms(sample)
    result["baseline_sample"] = len(sample)
    return result


def report(result: dict[str, Any], faces: Any, every: dict[str, Any] | None) -> None:
    n = result["photos"]
    per_1000 = result["seconds"] * 1000 / n
    ratio = result["full_decode_ms_per_photo"] / max(1e-9, result["indexer_cpu_ms_per_photo"])
    web_peak = max(result["web_peak_mib"].values(), default=0.0)
    web_sum = sum(result["web_peak_mib"].values())

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    print(f"\nlibraries ({n} photos incl. one of 100 MP, {result['gigabytes']:.2f} GB, CLI `library add`):")
    print("| measure | figure | goal | |")
    print("|---|---:|---:|---|")
    print(
        f"| first byte -> library ready, {n} photos | {result['seconds']:.1f} s ({n / result['seconds']:.2f} photos/s; "
        f"{per_1000:.0f} s per 1,000) | <= {GOALS['seconds_per_1000']:.0f} s per 1,000 | "
        f"{verdict(per_1000 <= GOALS['seconds_per_1000'])} |"
    )
    print(
        f"| indexer CPU per photo / plain full decode + resize ({result['baseline_sample']} of the same photos) | "
        f"{result['indexer_cpu_ms_per_photo']:.0f} ms / {result['full_decode_ms_per_photo']:.0f} ms = {ratio:.2f}x less | "
        f">= {GOALS['cpu_ratio']:.0f}x less | {verdict(ratio >= GOALS['cpu_ratio'])} |"
    )
    if "index_photo_ms_per_photo" in result:  # not in results saved before this row existed
        alone = result["full_decode_ms_per_photo"] / max(1e-9, result["index_photo_ms_per_photo"])
        print(
            f"| ... of which its own work (`index_photo`, this process, the same {result['baseline_sample']} photos"
            f" beside the baseline; no storage, no queue) | {result['index_photo_ms_per_photo']:.0f} ms = "
            f"{alone:.2f}x less | (no goal) | |"
        )
    if "reduced_decode_ms_per_photo" in result:
        floor = result["full_decode_ms_per_photo"] / max(1e-9, result["reduced_decode_ms_per_photo"])
        print(
            f"| ... the floor: libjpeg's 1/8 reduced decode alone (the same photos; every coefficient is still "
            f"entropy-decoded) | {result['reduced_decode_ms_per_photo']:.0f} ms = {floor:.2f}x less | (no goal) | |"
        )
    print(
        f"| web peak RSS (largest of {len(result['web_peak_mib'])} processes; their sum) | {web_peak:.0f} MiB ({web_sum:.0f}) | "
        f"<= {GOALS['web_mib']:.0f} MB | {verdict(web_peak <= GOALS['web_mib'])} |"
    )
    print(
        f"| indexer peak RSS (a 100 MP photo among them) | {result['indexer_peak_mib']:.0f} MiB | "
        f"<= {GOALS['indexer_mib']:.0f} MB | {verdict(result['indexer_peak_mib'] <= GOALS['indexer_mib'])} |"
    )
    print(
        f"| indexed / skipped | {result['indexed']} / {result['skipped']} | {n} / 0 | "
        f"{verdict(result['indexed'] == n and result['skipped'] == 0)} |"
    )
    print(
        f"| adding {result['added']} photos: photos decoded | {result['added_decoded']} ({result['added_seconds']:.1f} s) "
        f"| {result['added']} | {verdict(result['added_decoded'] == result['added'])} |"
    )
    if faces is not None:
        print(
            f"| faces near an edge: tile holds the whole face ({faces.photos} photos; OpenCV found a face in "
            f"{faces.detected}) | {faces.kept / faces.photos:.0%} (centre crop {faces.centre / faces.photos:.0%}; "
            f"a library built in one go, `render -l`: {faces.library_kept / faces.photos:.0%}) | "
            f">= {GOALS['faces']:.0%} | {verdict(faces.kept / faces.photos >= GOALS['faces'])} |"
        )
    if every is not None:
        scores, checks = every["scores"], every["checks"]
        print(
            f"| use every photo, {every['photos']} photos, {every['cells']} cells: photos placed | {every['placed']} | "
            f"{every['photos']} | {verdict(every['placed'] == every['photos'])} |"
        )
        print(
            f"| ... cells recognisable / colour moved / max window share | {scores['recognisable']:.1%} / "
            f"{scores['colour_moved']:.2f} / {scores['window_share']:.3f} | >= 95 % / <= 5 / <= 0.10 | "
            f"{verdict(checks['recognisable'] and checks['colour_moved'] and checks['window_share'])} |"
        )
        print(f"| ... from afar, ΔE00 at one pixel per cell (no goal here) | {scores['delta_e']:.2f} | | |")
    else:
        print("| use every photo | not measured in this run (`--every 0`) | | |")
    browser = result.get("browser_seconds")
    if browser is None:
        print("| browser upload flow | not measured: the libraries page has no folder upload here | | |")
    else:
        per = browser * 1000 / n
        print(
            f"| browser: the same photos, click -> nothing pending | {browser:.1f} s ({n / browser:.2f} photos/s; "
            f"{per:.0f} s per 1,000) | <= {GOALS['seconds_per_1000']:.0f} s per 1,000 | "
            f"{verdict(per <= GOALS['seconds_per_1000'])} |"
        )
    print(f"\nthe CLI said: {result['cli']}")


def main(argv: list[str] | None = None) -> int:
    from benchmarks import face_crops, library_every_photo

    args = _args(argv if argv is not None else sys.argv[1:] if __name__ == "__main__" else [])
    result = measure(args.photos, args.added)
    print(f"faces: {args.faces} photos with the astronaut near an edge ...", flush=True)
    faces = face_crops.measure(args.faces) if args.faces else None
    print(f"use every photo: a library of {args.every} small photos ...", flush=True)
    every = library_every_photo.measure(args.every) if args.every else None
    report(result, faces, every)
    RESULTS.mkdir(exist_ok=True)
    body = {**result, "faces": faces and faces.__dict__, "every_photo": every}
    (RESULTS / "libraries.json").write_text(json.dumps(body, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
