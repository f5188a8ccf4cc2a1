"""Command-line entry points dispatched by ``python -m controlplane`` (see __main__.py)."""
