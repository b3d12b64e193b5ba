"""Tests of the pure mosaic engine (workers.engine): no storage involved."""
