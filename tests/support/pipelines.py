"""Helpers for the pipeline tests: role subprocesses, submitting jobs, waiting for them.

Every test gets its own ``PHOTOMOSAICS_NAME_PREFIX``, so its queues, containers, tables and
tile library are its own inside the one session Azurite. Role processes are real processes
running ``photomosaics <role>`` (forked from a warm interpreter, ``role_fork``, unless
``fresh_processes``) with short polling intervals and a short visibility
timeout (so a killed worker's message comes back in seconds, not minutes); their logs go to
files under the test's tmp folder and are shown when a wait times out.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from dal.blobs.tile_maps import TileMap
from dal.config import CONNECTION_STRING_ENV, IMAGE_INPUT_CONTAINER, Settings, StorageClients
from dal.jobs.model import TERMINAL_STATUSES, Job
from dal.queues.messages import ImageRequestMessage
from mosaic.images import open_image
from mosaic.library import TileLibrary
from mosaic.render import render
from workers.imaging.slicing import encode_output
from workers.services import RoleServices

from .role_fork import ForkedRole
from .waiting import wait_for

CLIENT_ID = "pipeline-tests"
# Short waits everywhere: tests must not sit in back-off.
TEST_ENV = {
    "PHOTOMOSAICS_POLL_MIN_SECONDS": "0.05",
    "PHOTOMOSAICS_POLL_MAX_SECONDS": "0.5",
    "PHOTOMOSAICS_VISIBILITY_TIMEOUT": "6",
    "PHOTOMOSAICS_RETRY_DELAY_SECONDS": "1",
    "PHOTOMOSAICS_LOG_LEVEL": "INFO",
    # Pipeline tests submit many jobs under one client id; quotas have their own tests.
    "PHOTOMOSAICS_MAX_UNFINISHED_JOBS": "100000",
    "PHOTOMOSAICS_SUBMISSIONS_PER_MINUTE": "100000",
    "PHOTOMOSAICS_ADDRESS_BURST": "100000",
    "PHOTOMOSAICS_ADDRESS_SUBMISSIONS_PER_HOUR": "100000",
    "PHOTOMOSAICS_LIBRARY_ADDRESS_BURST": "100000",
    "PHOTOMOSAICS_LIBRARY_CLIENT_BURST": "100000",
    "PHOTOMOSAICS_LIBRARIES_PER_HOUR": "100000",
}


def synthetic_library(count: int = 48, *, seed: int = 7) -> TileLibrary:
    """A small library of varied tiles (flat colours, gradients, halves), deterministic."""
    rng = np.random.default_rng(seed)
    tiles = np.empty((count, 64, 64, 3), np.uint8)
    ramp = np.linspace(0.0, 1.0, 64)[None, :, None]
    for i in range(count):
        a, b = rng.integers(0, 256, size=(2, 3))
        kind = i % 3
        if kind == 0:
            tile = np.broadcast_to(a, (64, 64, 3)).astype(float)
        elif kind == 1:
            tile = np.broadcast_to(a + (b - a) * ramp, (64, 64, 3))
        else:
            tile = np.broadcast_to(a + (b - a) * ramp.transpose(1, 0, 2), (64, 64, 3))
        tiles[i] = np.clip(tile, 0, 255).astype(np.uint8)
    return TileLibrary.from_tiles(tiles, [f"tile{i:03d}" for i in range(count)])


def sample_photo(width: int, height: int, *, seed: int, fmt: str = "PNG") -> bytes:
    """A smooth random picture (blurred noise plus a gradient): structure for the matcher."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(2, height // 6), max(2, width // 6), 3), dtype=np.uint8)
    image = Image.fromarray(small, "RGB").resize((width, height), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


@dataclass
class RoleProcess:
    """One ``photomosaics <role>`` process (a fork, or a new interpreter when ``fresh``); its log is a file."""

    role: str
    args: Sequence[str]
    env: dict[str, str]
    log_path: Path
    fresh: bool = False  # a new interpreter (``photomosaics <role>`` as run), not a fork (``role_fork``)
    process: subprocess.Popen[bytes] | ForkedRole | None = None

    def start(self) -> RoleProcess:
        log = self.log_path.open("ab")  # there when start returns, as a Popen's output file is
        if not self.fresh:
            log.close()
            self.process = ForkedRole([self.role, *self.args], self.env, self.log_path)
            return self
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from photomosaics.cli import main; main()", self.role, *self.args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait(self, timeout: float) -> int:
        """Its exit status once it ended by itself; ``subprocess.TimeoutExpired`` after ``timeout``."""
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: no clean-up at all, as when a machine dies."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait; SIGKILL when it does not exit in time."""
        if self.process is None:
            return None
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(text[-lines:])


@dataclass
class Pipeline:
    """One isolated pipeline (a name prefix) in the session Azurite, and its role processes."""

    connection_string: str
    tmp_path: Path
    prefix: str = field(default_factory=lambda: f"p{uuid.uuid4().hex[:8]}")
    roles: list[RoleProcess] = field(default_factory=list)
    library_uri: str = ""
    fresh_processes: bool = False  # start each role as a new interpreter (to measure its memory), not a fork

    def __post_init__(self) -> None:
        env = {
            **os.environ,
            **TEST_ENV,
            CONNECTION_STRING_ENV: self.connection_string,
            "PHOTOMOSAICS_NAME_PREFIX": self.prefix,
        }
        self.env = env
        self.settings = Settings.from_env(env)
        self.services = RoleServices(StorageClients(self.connection_string, profile="probe"), self.settings, "tests")
        self.services.ensure()

    # -- roles ---------------------------------------------------------------------------

    def start(self, role: str, *args: str, env: dict[str, str] | None = None) -> RoleProcess:
        n = sum(1 for r in self.roles if r.role == role)
        log_path = self.tmp_path / f"{role}-{n}.log"
        process = RoleProcess(role, list(args), {**self.env, **(env or {})}, log_path, fresh=self.fresh_processes)
        self.roles.append(process.start())
        return process

    def stop_all(self) -> None:
        for process in self.roles:
            process.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {r.role} pid {r.pid} ---\n{r.log_tail()}" for r in self.roles if r.process)

    # -- jobs ----------------------------------------------------------------------------

    def create_library(self, name: str, library: TileLibrary) -> str:
        return self.services.libraries.create(name, "test tiles", library, shared=True)

    def submit(
        self,
        image: bytes,
        *,
        library_uri: str,
        tile_size: int,
        slices: int,
        tiles_across: int | None = None,
        ext: str = "png",
        max_uses: int | None = None,
        correction: int | None = None,
        use_every_photo: bool | None = None,
        cell_sizes: tuple[int, ...] | None = None,
    ) -> str:
        """Upload ``image`` and send an ImageRequest the way a CLI producer does (no job row)."""
        request_id = str(uuid.uuid4())
        url = self.services.blobs.upload(
            IMAGE_INPUT_CONTAINER, f"{request_id}.{ext}", image, content_type=f"image/{ext}"
        )
        queue = self.services.queues.image_request
        queue.submit(
            ImageRequestMessage(
                queue_uri=queue.url,
                client_id=CLIENT_ID,
                request_id=request_id,
                image_uri=url,
                image_library_uri=library_uri,
                tile_size=tile_size,
                slices=slices,
                tiles_across=tiles_across,
                max_uses=max_uses,
                correction=correction,
                use_every_photo=use_every_photo,
                cell_sizes=cell_sizes,
            )
        )
        return request_id

    def job(self, request_id: str) -> Job | None:
        return self.services.jobs.get(CLIENT_ID, request_id)

    def wait(self, request_ids: Iterable[str], *, timeout: float = 120.0) -> dict[str, Job]:
        """Poll until every job is done or failed *and* its event says so (a role writes the
        row's status first, then the event); AssertionError with logs on timeout."""
        pending = set(request_ids)
        finished: dict[str, Job] = {}

        def all_finished() -> bool:
            for rid in list(pending):
                job = self.job(rid)
                if (
                    job is not None
                    and job.status in TERMINAL_STATUSES
                    and any(event.kind == job.status for event in self.services.jobs.events(rid))
                ):
                    finished[rid] = job
                    pending.discard(rid)
            return not pending

        def unfinished() -> str:
            states = {rid: (j.status, sorted(j.slices_done)) if (j := self.job(rid)) else None for rid in pending}
            return f"{len(pending)} jobs unfinished: {states}\n{self.logs()}"

        wait_for(all_finished, seconds=timeout, step=0.25, what="every job finished", details=unfinished)
        return finished

    def output_bytes(self, job: Job) -> bytes:
        from dal.config import IMAGE_OUTPUT_CONTAINER

        assert job.output_name is not None
        return self.services.blobs.download(IMAGE_OUTPUT_CONTAINER, job.output_name)

    def output_pixels(self, job: Job) -> np.ndarray:
        data = self.output_bytes(job)
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("RGB"))

    def tile_map(self, job: Job) -> TileMap:
        """The job's tile map (``dal.blobs.tile_maps``), its bands joined."""
        from dal.blobs.tile_maps import load_job_map

        return TileMap.decode(load_job_map(self.services.blobs.download, job.request_id, job.slices))

    def slice_outputs(self, job: Job) -> np.ndarray:
        """The rendered slices (lossless .npy) stacked: the mosaic before the JPEG encode.

        A one-slice job has none (its processor wrote the final JPEG directly): compare its
        output bytes instead.
        """
        from dal.blobs.names import slice_output_name
        from dal.blobs.rendered import decode_rendered
        from dal.config import SLICE_RESPONSE_CONTAINER

        assert job.slices > 1, "a one-slice job has no rendered slices in storage"
        bands = [
            decode_rendered(
                self.services.blobs.download(SLICE_RESPONSE_CONTAINER, slice_output_name(job.request_id, seq))
            )
            for seq in range(job.slices)
        ]
        return np.concatenate(bands, axis=0)

    def queue_depths(self) -> dict[str, int]:
        depths = {}
        for queue in self.services.queues.workflow():
            depths[queue.name] = queue.approximate_depth()
            depths[queue.poison.name] = queue.poison.approximate_depth()
        return depths


# Polling so slow that only a hint (or a hand-back with its hint) explains a prompt pickup.
SLOW_POLLS = {
    "PHOTOMOSAICS_POLL_MIN_SECONDS": "30",
    "PHOTOMOSAICS_POLL_MAX_SECONDS": "30",
    "PHOTOMOSAICS_POLL_MAX_HINTED_SECONDS": "60",
}


def log_lines(pipe: Pipeline, needle: str) -> list[str]:
    return [line for r in pipe.roles for line in r.log_path.read_text(errors="replace").splitlines() if needle in line]


def woken_queues(pipe: Pipeline) -> set[str]:
    """The queues whose listeners logged detected work."""
    return {line.split("queue=")[1].split()[0] for line in log_lines(pipe, "listener.work_detected")}


def assert_job_pixel_identical(pipe: Pipeline, rid: str, image: bytes, *, tile: int, slices: int | None = None) -> None:
    """The job is done, and its JPEG (and plain slices) are the offline render's bytes."""
    job = pipe.job(rid)
    assert job is not None and job.status == "done", (job, pipe.logs())
    assert_jobs_pixel_identical(pipe, {rid: job}, {rid: image}, tile=tile, slices=slices)


def assert_jobs_pixel_identical(
    pipe: Pipeline, finished: dict, images: dict, *, tile: int, slices: int | None = None
) -> None:
    """Every finished job is done, its JPEG the offline render's byte for byte, and its plain
    slices (a giant job's pieces send none back) its pixels. The offline render is one band:
    the slicing never changes the mosaic (``mosaic.parts``). ``slices``: what the job asked for,
    checked against what it got where the grid has the parts for it."""
    from mosaic.grid import Grid
    from mosaic.parts import plan_parts
    from mosaic.pieces import job_plan

    library = pipe.services.libraries.load(pipe.library_uri)
    for rid, job in finished.items():
        assert job.status == "done", f"{rid}: {job.status} {job.error}"
        expected = render(
            open_image(images[rid]),
            library,
            tile_size=tile,
            seed=rid,
            max_output_pixels=pipe.settings.max_output_pixels,
        )
        grid = Grid(job.tiles_across, job.tiles_down, job.output_width, job.output_height, tile)
        plan = job_plan(grid, job.slices)
        if slices is not None:
            asked = job_plan(grid, slices)
            assert job.slices == (asked.bands if asked is not None else min(slices, plan_parts(grid).count)), rid
        if job.slices > 1 and plan is None:
            assert np.array_equal(pipe.slice_outputs(job), expected), rid
        assert pipe.output_bytes(job) == encode_output(expected), rid
