"""``photomosaics submit``: make a mosaic through the web app's HTTP API, with a progress bar.

A plain client of the public API (the same calls the browser makes): POST the photo, follow
the job's Server-Sent Events (falling back to polling), then stream the result to a file
(a mosaic too large for a JPEG comes as its Deep Zoom zip and is saved under ``.zip``).
The photo is streamed from its file, never read whole; a pipe (``submit <(curl ...) -o
out.jpg``) is read once.
The session keeps the app's client-id cookie, and this machine's between commands
(``photomosaics.client_file``): the job is its own, and so are the libraries ``library add``
made. Any failure prints one clear line and exits 1. A job it gives up on (Ctrl-C: exit 130;
``--timeout``) is cancelled (``POST .../cancel``): nothing else would fetch it.

A submission refused for now (``429`` over a quota, ``503`` busy or storage unavailable) is
tried again after the server's ``Retry-After`` (5 s when it sends none), saying so on
stderr, for at most ``--retry-for`` seconds (600 by default; 0: never retry) and never past
``--timeout``. Nothing was stored by a refused submission, so trying again is safe. Once the
app has answered, a refused connection (the app restarting) is tried again for about 45 s.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from mosaic.limits import MAX_TILE_SIZE
from photomosaics.client_file import load_client, save_client
from photomosaics.commands.render import cell_sizes_options
from photomosaics.render_outputs import check_not_the_photo
from photomosaics.web_api import DEFAULT_URL, WebApi, check_base_url, describe_error
from photomosaics.whole_files import written_whole

_TERMINAL = {"done", "failed"}
_RETRYABLE = (429, 503)  # over a quota, busy (backpressure) or storage unavailable: nothing was stored
_DEFAULT_RETRY_AFTER = 5
UNSIZED_LIMIT = 256 << 20  # a pipe's or device's bytes read into memory, at most (the app's own limit is lower)


def _retry_after(response: Any) -> int:
    try:
        return max(1, int(response.headers.get("Retry-After", "")))
    except ValueError:
        return _DEFAULT_RETRY_AFTER


class _Photo:
    """IMAGE as each request sends it. A file is streamed from disk every time, never held whole
    in memory: one of gigabytes costs the client nothing before the app's 413. A pipe or a device
    (``submit <(curl ...)``) can be read only once: it is read then, up to ``UNSIZED_LIMIT``."""

    def __init__(self, path: Path) -> None:
        self.name = path.name
        self.path = path if path.is_file() else None  # a symlink to a file is a file; a FIFO is not
        self.data = None if self.path else self._read_once(path)

    @staticmethod
    def _read_once(path: Path) -> bytes:
        try:
            with path.open("rb") as stream:
                data = stream.read(UNSIZED_LIMIT + 1)
        except OSError as exc:
            raise click.BadParameter(f"cannot read {path}: {exc.strerror or exc}", param_hint="IMAGE") from None
        if len(data) > UNSIZED_LIMIT:
            raise click.BadParameter(
                f"{path} is not a file and holds more than {UNSIZED_LIMIT >> 20} MiB: save the photo to a file first",
                param_hint="IMAGE",
            )
        return data

    @contextlib.contextmanager
    def multipart(self, form: dict[str, str]) -> Iterator[dict[str, Any]]:
        """``requests`` arguments for a multipart POST of ``form`` and the photo as ``image``,
        streamed (requests-toolbelt's encoder: requests' own ``files=`` builds the body in memory)."""
        from requests_toolbelt import MultipartEncoder

        try:
            stream = self.path.open("rb") if self.path else io.BytesIO(self.data or b"")
        except OSError as exc:
            raise click.ClickException(f"cannot read {self.path}: {exc.strerror or exc}") from None
        with stream:
            body = MultipartEncoder(fields={**form, "image": (self.name, stream, "application/octet-stream")})
            yield {"data": body, "headers": {"Content-Type": body.content_type}}


def _create(api: WebApi, photo: _Photo, form: dict[str, str], *, retry_until: float) -> dict[str, Any]:
    """POST the job; a 429/503 is retried after its Retry-After until ``retry_until``."""
    attempt = 1
    while True:
        with photo.multipart(form) as body:
            response = api.call("POST", "/api/jobs", ok=(202, *_RETRYABLE), **body)
        if response.status_code == 202:
            return dict(response.json())
        wait = _retry_after(response)
        if time.monotonic() + wait > retry_until:
            raise click.ClickException(f"{describe_error(response)}; gave up after {attempt} attempt(s)")
        click.echo(f"{describe_error(response)}: retrying in {wait} s (attempt {attempt + 1})", err=True)
        time.sleep(wait)
        attempt += 1


_STREAM_RETRY_SECONDS = 2.0  # between streams when the server gave no hint (refused or broken)


def _sse(response: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of a Server-Sent Events stream."""
    event, data = "message", list[str]()
    for line in response.iter_lines(decode_unicode=True):
        if line is None:
            continue
        if line == "":
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", list[str]()
        elif line.startswith(":"):
            yield "comment", {}  # a keep-alive: lets the caller check its deadline
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def _follow(api: WebApi, job: dict[str, Any], *, deadline: float) -> Iterator[dict[str, Any]]:
    """Job snapshots until it is done or failed: over SSE, reconnecting when a stream ends (the
    server ends each after a few minutes) and polling once between streams, also when the server
    refuses a stream (429: too many) or it breaks."""
    wait = _STREAM_RETRY_SECONDS
    while time.monotonic() < deadline:
        for data in _one_stream(api, job, deadline=deadline):
            if data.get("after_ms") is not None:  # the server's reconnect hint
                wait = max(0.1, float(data["after_ms"]) / 1000)
                continue
            yield data
            if data["status"] in _TERMINAL:
                return
        current = api.call("GET", job["status_url"]).json()
        yield current
        if current["status"] in _TERMINAL:
            return
        time.sleep(max(0.0, min(wait, deadline - time.monotonic())))


def _one_stream(api: WebApi, job: dict[str, Any], *, deadline: float) -> Iterator[dict[str, Any]]:
    """The snapshots of one event stream (and its reconnect hint), until it ends or breaks."""
    import requests

    # The app sends a keep-alive comment every 15 s, so 20 s of silence means a broken stream.
    read_timeout = max(0.5, min(20.0, deadline - time.monotonic()))
    try:
        with api.call("GET", job["events_url"], stream=True, timeout=(api.timeout, read_timeout)) as stream:
            for event, data in _sse(stream):
                if event == "job":
                    yield data
                    if data["status"] in _TERMINAL:
                        return
                if event == "reconnect":
                    yield {"after_ms": data.get("after_ms", 2000)}
                    return
                if event == "end" or time.monotonic() > deadline:
                    return
    except (requests.RequestException, click.ClickException, ValueError):
        return  # refused (429) or broken: the caller polls, then tries again


@click.command()
@click.argument("image", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--library", "-l", required=True, help="Tile library name (see `photomosaics library list`).")
@click.option(
    "--tile-size",
    type=click.IntRange(1, MAX_TILE_SIZE),
    default=16,
    show_default=True,
    help="Tile side in the output, in pixels.",
)
@click.option("--slices", type=click.IntRange(min=1), default=4, show_default=True, help="Bands rendered in parallel.")
@click.option(
    "--tiles-across", type=click.IntRange(min=1), default=None, help="Mosaic width in tiles [default: the planner's]."
)
@click.option(
    "--correction",
    type=click.IntRange(0, 100),
    default=None,
    help="Tiles <-> photo: how far (percent) each tile's colour moves toward its spot of the photo, "
    "the tile moved as a whole [default: the server's engine default].",
)
@click.option(
    "--use-every-photo",
    is_flag=True,
    default=False,
    help="Every photo of the library (near-duplicates counted once) at least once; refused, naming "
    "the smallest --tiles-across that works, when the mosaic has too few tiles.",
)
@cell_sizes_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Where to save the mosaic [default: IMAGE-mosaic.jpg].",
)
@click.option(
    "--url",
    default=lambda: os.environ.get("PHOTOMOSAICS_URL", DEFAULT_URL),
    show_default=DEFAULT_URL,
    callback=check_base_url,
    help="Base URL of the web app (env PHOTOMOSAICS_URL).",
)
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=900.0, show_default=True, help="Give up after this many seconds."
)
@click.option(
    "--retry-for",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    help="Keep retrying a submission refused with 429 (quota) or 503 (busy) for this many seconds, "
    "waiting as the server's Retry-After says; 0: do not retry.",
)
def submit(
    *,
    image: Path,
    library: str,
    tile_size: int,
    slices: int,
    tiles_across: int | None,
    correction: int | None,
    use_every_photo: bool,
    cell_sizes: tuple[int, ...] | None,
    split: int | None,
    output: Path | None,
    url: str,
    timeout: float,
    retry_for: float,
) -> None:
    """Make a mosaic of IMAGE through the web app's API and save it."""
    started = time.monotonic()
    deadline = started + timeout
    if output is None and not image.is_file():  # /dev/fd/63-mosaic.jpg cannot be written
        raise click.BadParameter(f"{image} is not a file: name the mosaic's file with --output", param_hint="IMAGE")
    output = output or image.with_name(f"{image.stem}-mosaic.jpg")
    if not output.parent.is_dir():  # found out now, not after the whole job has run
        raise click.BadParameter(f"folder {output.parent} does not exist", param_hint="--output")
    if not os.access(output.parent, os.W_OK):
        raise click.BadParameter(f"folder {output.parent} is not writable", param_hint="--output")
    check_not_the_photo(image, output, "--output")
    photo = _Photo(image)
    api = WebApi(url, timeout=30.0)
    load_client(api.session, api.base)  # this machine's client: its own libraries (library add) are usable
    form = {"library": library, "tile_size": str(tile_size), "slices": str(slices)}
    if tiles_across is not None:
        form["tiles_across"] = str(tiles_across)
    if correction is not None:
        form["correction"] = str(correction)
    if use_every_photo:
        form["use_every_photo"] = "true"
    if cell_sizes is not None:
        form["cell_sizes"] = ",".join(map(str, cell_sizes))
    if split is not None:
        if cell_sizes is None or len(cell_sizes) < 2:
            raise click.BadParameter(
                "split says how cells of several sizes split: give --cell-sizes too", param_hint="--split"
            )
        form["split"] = str(split)
    _say_reach(api, photo, form)
    created = _create(api, photo, form, retry_until=min(deadline, started + retry_for))
    save_client(api.session, api.base)
    job = created  # its request_id and status_url: enough to cancel it from here on
    try:
        job = api.call("GET", created["status_url"]).json()
        click.echo(
            f"job {job['request_id']}: {job['output_width']}×{job['output_height']} px, "
            f"{job['tiles_across']}×{job['tiles_down']} tiles of {tile_size} px from {library!r}",
            err=True,
        )
        if tiles_across is not None and job["tiles_across"] < tiles_across:
            click.echo(f"note: {tiles_across:,} tiles across would be over the service's output limit", err=True)
        done = 0
        with click.progressbar(length=job["slices"], label="slices", show_pos=True, file=sys.stderr) as bar:
            for state in _follow(api, job, deadline=deadline):
                bar.update(len(state["slices_done"]) - done)
                done = len(state["slices_done"])
                job = state  # the last state seen decides below
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: {_cancel(api, job)}", err=True)
        sys.exit(130)
    if job["status"] == "failed":
        raise click.ClickException(f"job {job['request_id']} failed: {job.get('error') or 'no reason given'}")
    if job["status"] != "done":
        raise click.ClickException(
            f"job {job['request_id']} is still {job['status']} after {timeout:.0f} s: {_cancel(api, job)}"
        )
    with api.call("GET", job["result_url"], stream=True) as response:
        output = _saved_as(output, response, job)
        try:
            with written_whole(output) as partial, partial.open("wb") as out:
                for chunk in response.iter_content(chunk_size=1 << 16):
                    out.write(chunk)
        except OSError as exc:  # a full disk, a folder removed meanwhile: one line, not a traceback
            raise click.ClickException(f"cannot save {output}: {exc.strerror or exc}") from None
    click.echo(f"saved {output} ({output.stat().st_size:,} bytes) in {time.monotonic() - started:.1f} s", err=True)


def _say_reach(api: WebApi, photo: _Photo, form: dict[str, str]) -> None:
    """Before the job: whether the library reaches the photo's colours (``POST /api/plan``), said
    only when it does not. Any other answer is left to the submission, which says it clearly."""
    with photo.multipart({k: v for k, v in form.items() if k != "slices"}) as body:
        response = api.call("POST", "/api/plan", ok=(200, 400, 404, 405, 413, 415, 422, 429, 503), **body)
    if response.status_code == 200 and response.json().get("reach", {}).get("warn"):
        click.echo(f"note: {response.json()['reach']['message']}", err=True)


def _cancel(api: WebApi, job: dict[str, Any]) -> str:
    """Cancel a job this command gives up on (its client id is this machine's: nothing else
    would fetch it), so it stops using the workers and a place in the quota; what happened."""
    try:
        api.call("POST", f"{job['status_url']}/cancel")
    except click.ClickException as exc:  # finished meanwhile (409), or the app is gone
        return f"job {job['request_id']} was not cancelled ({exc.message})"
    return f"job {job['request_id']} cancelled"


def _saved_as(output: Path, response: Any, job: dict[str, Any]) -> Path:
    """Where the result goes: a mosaic over JPEG's 65,500 px a side has only its Deep Zoom
    pyramid, a zip, as the full-size image; it is saved under ``.zip``, not as a broken ``.jpg``."""
    if response.headers.get("Content-Type", "").split(";")[0].strip() != "application/zip":
        return output
    if output.suffix.lower() != ".zip":
        output = output.with_suffix(".zip")
    click.echo(
        f"the mosaic is {job['output_width']:,}×{job['output_height']:,} px, too large for a JPEG: "
        f"saving its Deep Zoom pyramid (a zip) as {output}",
        err=True,
    )
    return output
