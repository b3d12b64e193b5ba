"""The pixels the controller and the processors hand each other, in the formats both read.

- ``slicing``: a job cut into bands (a slice's rows) as PNGs that say where they sit in the grid.
- ``stitching``: the rendered slices streamed into the final JPEG and the Deep Zoom pyramid (libvips).
- ``jpeg_segments``: a giant mosaic's JPEG as band segments, concatenated instead of re-encoded.
- ``band_pieces``: a giant band's final pieces (JPEG rows, pyramid tiles) staged onto the outputs.

Both pipeline roles import this room; it imports no role.
"""
