"""Each cell's ranked candidate tiles for the variety rule (``variety`` fills them, ``rounds``
walks them): its own module so that ``variety`` and ``rounds`` both import it and not each other.
"""

from __future__ import annotations

import numpy as np

from .matching import best, nearest, ranked_neighbours, tile_columns
from .tile_index import TileIndex, nearest_tiles, ranked_around


class Candidates:
    """Each cell's ranked tiles, best first; longer lists only for cells that need them.

    A cell's first list is its nearest tile plus that tile's nearest neighbours among the
    tiles (a graph computed once per library and tile size), ranked by exact distance to the
    cell: near tiles of the best tile are near the cell, and this costs a few dozen
    look-ups per cell instead of a search of the whole library. A cell that exhausts its
    list gets the exact next-best tiles (widths 4x, up to all the tiles it may use).
    With an ``index`` (big libraries, ``tile_index``) the nearest tile is searched in the
    index's lists instead of the whole library; the ranking stays exact. Longer lists live
    in their own rows (``longer``), so a few cells that need them do not widen every cell's.
    ``nearest_known``: each cell's ``nearest_tiles`` through ``index`` where the caller has it
    already (``sized`` reads it first to split misfitting blocks), so it is not searched twice.
    """

    def __init__(
        self,
        cells: np.ndarray,
        tiles: np.ndarray,
        groups: list[tuple[np.ndarray, np.ndarray]],
        graph: np.ndarray | None,
        index: TileIndex | None = None,
        nearest_known: np.ndarray | None = None,
    ) -> None:
        self.cells, self.tiles = cells, tiles
        n = cells.shape[0]
        self.allowed = np.empty(n, np.int64)  # how many tiles each cell may use
        self.group_of = np.empty(n, np.int64)
        self.groups = groups  # (cell indices, allowed tile indices)
        self._columns: dict[int, np.ndarray] = {}  # each group's tiles as ``best`` wants them
        width = 1 if graph is None else graph.shape[1] + 1
        self.ranked = np.full((n, width), -1, np.int32)
        self.width = np.ones(n, np.int64)
        self.longer = np.empty((0, 0), np.int32)  # refilled lists, one row per refilled cell
        self.row = np.full(n, -1, np.int64)  # each cell's row in ``longer`` (-1: none)
        for g, (idx, members) in enumerate(groups):
            self.allowed[idx] = members.size
            self.group_of[idx] = g
            if graph is not None and members.size == tiles.shape[0]:
                if index is None:
                    self.ranked[idx] = ranked_neighbours(cells[idx], tiles, graph)
                else:
                    first = nearest_tiles(cells[idx], tiles, index) if nearest_known is None else nearest_known[idx]
                    self.ranked[idx] = ranked_around(cells[idx], tiles, first, graph)
                self.width[idx] = width
            else:
                self.ranked[idx, 0] = members[nearest(cells[idx], tiles[members])]

    def pin(self, cells: np.ndarray, tiles: np.ndarray) -> None:
        """Give each of ``cells`` (flat indices) the one-tile list ``tiles`` ("use every photo")."""
        self.ranked[cells] = -1
        self.ranked[cells, 0] = tiles
        self.width[cells] = 1
        self.allowed[cells] = 1

    def at(self, cells: np.ndarray, position: np.ndarray) -> np.ndarray:
        """The tile at ``position`` (< width) in the lists of ``cells``."""
        rows = self.row[cells]
        out = np.empty(cells.size, np.int32)
        short = rows < 0
        out[short] = self.ranked[cells[short], position[short]]
        out[~short] = self.longer[rows[~short], position[~short]]
        return out

    def refill(self, wanted: np.ndarray) -> None:
        """Lengthen the lists of cells ``wanted`` (flat indices) whose width allows it."""
        wanted = wanted[self.width[wanted] < self.allowed[wanted]]
        if not wanted.size:
            return
        new_width = np.minimum(self.allowed[wanted], np.maximum(8, 4 * self.width[wanted]))
        self._make_rows(wanted, int(new_width.max()))
        for g, (_, members) in enumerate(self.groups):
            mine = wanted[self.group_of[wanted] == g]
            if mine.size:
                m = int(new_width[self.group_of[wanted] == g].max())
                if g not in self._columns:  # refills come in dozens of small rounds: prepare once
                    self._columns[g] = tile_columns(self.tiles[members])
                index, _ = best(self.cells[mine], self.tiles, m, columns=self._columns[g])
                self.longer[self.row[mine], :m] = members[index]
                self.width[mine] = m

    def _make_rows(self, cells: np.ndarray, width: int) -> None:
        """Give ``cells`` rows in ``longer`` at least ``width`` wide."""
        new = cells[self.row[cells] < 0]
        rows = self.longer.shape[0] + new.size
        if new.size or width > self.longer.shape[1]:
            grown = np.full((rows, max(width, self.longer.shape[1])), -1, np.int32)
            grown[: self.longer.shape[0], : self.longer.shape[1]] = self.longer
            self.longer = grown
        self.row[new] = np.arange(rows - new.size, rows)
