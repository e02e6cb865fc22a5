"""Test ids made only of letters, digits and ``_.-``.

``ids=repr`` gives ids holding quotes, backslashes, NULs or accents, which pytest escapes when
it names the test and then cannot find again when handed that name (mutmut runs tests by
name), so parametrised cases use these instead.
"""

from __future__ import annotations

import re


def plain_id(value: object) -> str:
    """``value``'s repr with every other character as ``_``, cut to 40 characters."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", repr(value))[:40] or "empty"
