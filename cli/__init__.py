"""The `attnref` command line (python -m cli)."""
