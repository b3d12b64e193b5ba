"""Running the whole app on one machine: the embedded Azurite and the process supervisor.

Used by ``photomosaics run``, ``make`` and the tests; no deployed role imports it.

- ``accounts``: the run's storage accounts (configured or embedded) and what they must hold.
- ``children``: the run's child processes, their environment, the hand-back when one dies.
- ``node_runtime``: which Node.js runs Azurite (the system's, or one from PyPI).
- ``azurite``: the embedded storage emulator.
- ``supervisor``: keep child processes running, restart crashed ones, stop them cleanly.
- ``storage_keeper``: keeps the embedded Azurite alive the same way.
"""
