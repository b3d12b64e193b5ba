"""What the JobController reads before it slices a job: its tile library (known to exist, and
loaded for a job chosen whole) and its photo (decoded, EXIF orientation applied). Anything that
cannot be used is a ``PermanentJobError`` that says what and why: the job fails with it.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from dal.errors import BlobMissingError, InvalidLibraryNameError
from dal.jobs.model import library_name
from dal.queues.messages import ImageRequestMessage
from mosaic.cover import CoverError
from mosaic.errors import TileBudgetError
from mosaic.images import ImageDecodeError, open_image
from mosaic.library import LibraryFormatError
from mosaic.parts import plan_parts
from mosaic.tile_choice import choose_whole
from workers.job_options import job_options
from workers.runtime.errors import PermanentJobError
from workers.services import RoleServices
from workers.stages import Stopwatch

if TYPE_CHECKING:
    from PIL import Image

    from mosaic.grid import Grid


class JobInputs:
    """A controller's reads of jobs' libraries and photos; remembers which libraries exist (10 s)."""

    def __init__(self, services: RoleServices) -> None:
        self.services = services
        self._libraries_seen: dict[str, float] = {}  # library uri -> when it last existed (monotonic)

    def choose_whole(self, message: ImageRequestMessage, cells: Any, grid: Grid, photo: tuple[int, int]) -> Any:
        """The whole job's tile per cell: no tile more than ``max_uses`` times, every photo once
        with ``use_every_photo``."""

        name = library_name(message.image_library_uri)
        try:
            library = self.services.libraries.load(message.image_library_uri, version=message.library_version)
        except (BlobMissingError, LookupError) as exc:
            raise PermanentJobError(f"the tile library {name!r} cannot be used: {exc}") from None
        except LibraryFormatError as exc:
            raise PermanentJobError(f"the tile library {name!r} is damaged: {exc}") from None
        try:
            options = job_options(
                correction=message.correction, max_uses=message.max_uses, use_every_photo=message.use_every_photo
            )
            return choose_whole(
                cells,
                library,
                tile_size=grid.tile_size,
                seed=message.request_id,
                options=options,
                parts=plan_parts(grid),
                photo=photo,
            )
        except CoverError as exc:
            raise PermanentJobError(f"the mosaic cannot use every photo: {exc}") from None
        except TileBudgetError as exc:
            raise PermanentJobError(
                f"the mosaic cannot use each tile at most {message.max_uses} times: {exc}"
            ) from None

    def read_image(self, message: ImageRequestMessage, clock: Stopwatch) -> Image.Image:
        """The job's photo, decoded, once its tile library is known to exist; PermanentJobError
        when either cannot be used."""
        name = library_name(message.image_library_uri)
        try:
            found = self.library_exists(message.image_library_uri)
        except InvalidLibraryNameError as exc:
            raise PermanentJobError(f"the tile library address is not a library: {exc}") from None
        if not found and not self.services.libraries.in_account(message.image_library_uri):
            raise PermanentJobError(
                f"the tile library address {message.image_library_uri} is not in this storage account"
            )
        if not found:
            raise PermanentJobError(f"the tile library {name!r} does not exist")
        try:
            data = self.services.download_url(message.image_uri)  # either account when paired
            clock.lap("image_download")
        except BlobMissingError:
            raise PermanentJobError("the uploaded image is gone from storage; please upload it again") from None
        except ValueError as exc:
            raise PermanentJobError(f"the image address is not a blob of this storage account: {exc}") from None
        try:
            image = open_image(data, max_pixels=self.services.settings.max_input_pixels)
        except ImageDecodeError as exc:
            raise PermanentJobError(f"the image could not be read as a picture: {exc}") from None
        clock.lap("image_decode")
        return image

    def library_exists(self, uri: str) -> bool:
        """Whether the library exists, asked at most once per ``library_revalidate_seconds`` (10 s)
        per library, as processors revalidate theirs: jobs in a row share one check. A library
        deleted within that window fails the job at its processors instead, with the same reason."""
        now, window = time.monotonic(), self.services.settings.library_revalidate_seconds
        if now - self._libraries_seen.get(uri, -math.inf) < window:
            return True
        found = self.services.libraries.exists(uri)
        if found:
            if len(self._libraries_seen) > 1024:  # bounded; libraries are few
                self._libraries_seen.clear()
            self._libraries_seen[uri] = now
        return found
