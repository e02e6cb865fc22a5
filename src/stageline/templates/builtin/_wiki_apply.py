"""The end of every wiki template: the operations' ``apply`` gate, and the input checks.

The operation left its result as a commit on the run's branch; the ``apply`` gate (or the
``apply`` input, ``--apply``) brings it into the checkout (see ``stageline.operations``).
"""

from __future__ import annotations

from stageline.operations import add_apply as add_apply_gate
from stageline.templates._builder import Template
from stageline.templates.builtin._checks import (
    git_folder,
    harness_spec,
    path_input,
)

__all__ = ["add_apply"]


def add_apply(template: Template, after: str) -> Template:
    """``after`` -> (``apply`` gate unless the ``apply`` input) -> ``apply_changes``; and the
    input checks every wiki template makes before a run exists."""
    template.require_input("wiki", "the wiki folder")
    template.add_input_check(path_input("wiki", kind="folder", must_exist=False))
    template.add_input_check(git_folder("wiki", needs_commit=True))
    template.add_input_check(harness_spec)
    return add_apply_gate(template, after)
