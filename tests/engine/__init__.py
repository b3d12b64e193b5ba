"""Tests of the pure mosaic engine (mosaic): no storage involved."""
