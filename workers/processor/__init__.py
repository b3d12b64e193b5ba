"""The ImageProcessor role: one slice of a job rendered into its mosaic.

- ``processor``: ``ImageProcessor``, the handler of ``slicerequest`` (library, band, render, outputs).

What it reads and writes beside pixels (band PNGs, the JPEG and pyramid, a giant band's
pieces) is in ``workers.imaging``, shared with the controller.
"""
