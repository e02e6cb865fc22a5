"""The ``stageline`` command line: a thin layer over the runner and the ledger."""

from stageline.cli._app import app
from stageline.cli._main import main

__all__ = ["app", "main"]
