"""The worker roles and the queue runtime they run on.

The rooms' allowed import directions are declared in ``tests/test_layers.py``.
"""
