"""The ``supervisor`` commands, one module each (``cli.py`` parses and dispatches)."""
