"""One module per group of sub-commands; each registers itself on ``photomosaics.cli.main``."""
