"""Photo Mosaics: the `photomosaics` command line (one click group, a sub-command per role)."""
