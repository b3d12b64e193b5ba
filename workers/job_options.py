"""The engine options of a job, from what its messages carry.

A job's messages name only what the person chose (the colour correction, fair use, every
photo, cells of several sizes); everything else is the engine's default
(``mosaic.options.DEFAULT_OPTIONS``), so the controller's fair-use assignment and every
processor's band render with the same options.
"""

from __future__ import annotations

import dataclasses

from mosaic.options import DEFAULT_OPTIONS, RenderOptions

__all__ = ["job_options"]


def job_options(
    *,
    correction: int | None = None,
    max_uses: int | None = None,
    use_every_photo: bool | None = None,
    cell_sizes: tuple[int, ...] | None = None,
    split: int | None = None,
) -> RenderOptions:
    """``DEFAULT_OPTIONS`` with what the job's message sets (None: the default)."""
    options = DEFAULT_OPTIONS
    if cell_sizes is not None:
        options = dataclasses.replace(options, cell_sizes=cell_sizes)
    if split is not None:
        options = dataclasses.replace(options, split=split)
    if correction is not None:
        options = dataclasses.replace(options, correction=correction)
    if max_uses is not None:
        options = dataclasses.replace(options, max_uses=max_uses)
    if use_every_photo:
        options = dataclasses.replace(options, use_every_photo=True)
    return options
