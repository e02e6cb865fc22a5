"""The YAML example in ``stageline.templates._yaml``'s docstring is valid YAML of the format."""

from __future__ import annotations

import yaml

from stageline.templates import _yaml


def _example() -> str:
    doc = _yaml.__doc__ or ""
    assert "```yaml\n" in doc
    return doc.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_docstring_example_parses_as_yaml_with_only_known_keys() -> None:
    data = yaml.safe_load(_example())
    assert isinstance(data, dict)
    assert set(data) <= set(_yaml.TOP_KEYS)
    assert data["name"] == "review_pipeline"
    assert all(
        isinstance(t, str) and t in _yaml.TYPES
        for t in (v if isinstance(v, str) else v["type"] for v in data["state"].values())
    )
    questions = data["questions"]["clarify"]["questions"]
    assert [q["text"] for q in questions] == ["What is in scope?", "How big?", "Limits?"]
    assert data["gates"]["approval"]["on_deadline"] == "reject"


def test_the_docstring_example_parses_with_the_template_loader() -> None:
    """The loader stageline reads templates with (line numbers, duplicate keys refused)."""
    data = yaml.load(_example(), Loader=_yaml._LineLoader)
    assert data["stages"]["outline"]["use"] == "mypkg.stages:outline"
