"""One module per group of sub-commands; ``photomosaics.cli.COMMANDS`` names each one's home."""
