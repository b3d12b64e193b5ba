"""The indexer role (tile libraries at a person's scale): see issue 41."""
