"""The indexer role (tile libraries at a person's scale): ``indexer``, the ``indexrequest`` handler."""
