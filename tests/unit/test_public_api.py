"""The public API is exactly what ``stageline.__all__`` names (httpx's exported-members test)."""

from __future__ import annotations

import stageline


def test_all_names_exist_and_nothing_else_public_is_exported() -> None:
    public = {name for name in dir(stageline) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(stageline, name)).__name__ == "module"}
    assert set(stageline.__all__) - {"__version__"} == public - modules
    for name in stageline.__all__:
        assert hasattr(stageline, name), name


def test_version_is_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    assert stageline.__version__ == version("stageline")
