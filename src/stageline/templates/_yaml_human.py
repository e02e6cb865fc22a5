"""The ``gates:`` and ``questions:`` sections of a YAML template: nodes that wait for a person."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stageline.errors import TemplateError

if TYPE_CHECKING:
    from stageline.templates._builder import Template
    from stageline.templates._yaml_read import _Map, _Reader

__all__ = ["read_human"]

_GATE_KEYS = (
    "changes_to",
    "reject_to",
    "max_changes",
    "feedback",
    "show",
    "deadline",
    "on_deadline",
)
_QUESTION_KEYS = ("questions", "ask", "max_turns", "history", "answers", "deadline", "on_deadline")
_OPTION = {"feedback": "feedback_key", "history": "history_key", "answers": "answers_key"}


def read_human(reader: _Reader, template: Template, top: _Map) -> None:
    """The ``gates:`` and ``questions:`` sections: nodes that wait for a person."""
    for section, keys in (("gates", _GATE_KEYS), ("questions", _QUESTION_KEYS)):
        found = top.get(section)
        if found is None:
            continue
        nodes = reader.mapping(found, section, top.at(section))
        for node, spec in nodes.items():
            line = nodes.at(node)
            if not isinstance(node, str) or node in ("END", "end") or ":" in node:
                reader.fail(f"bad node name {node!r}", line)
            what = f"{section[:-1]} {node!r}"
            opts = {} if spec is None else reader.mapping(spec, what, line, keys)
            options: dict[str, Any] = {}
            for key, value in opts.items():
                at = opts.at(key)  # type: ignore[attr-defined]
                if key in ("changes_to", "reject_to", "feedback", "history", "answers"):
                    value = reader.text(value, f"{what} {key}", at)
                elif key in ("show", "on_deadline") and not isinstance(value, str):
                    value = reader.names(value, f"{what} {key}", at)
                elif key in ("max_changes", "max_turns") and (
                    isinstance(value, bool) or not isinstance(value, int)
                ):
                    reader.fail(f"{what}: {key} must be a whole number, got {value!r}", at)
                elif key == "ask":
                    value = reader.resolve(value, f"{what} ask", at, 3)
                options[_OPTION.get(key, key)] = value
            where = reader.where(line)
            try:
                if section == "gates":
                    template.add_gate(node, where=where, **options)
                else:
                    template.add_question(node, where=where, **options)
            except TemplateError:
                raise
            except Exception as exc:
                reader.fail(f"{what}: {exc}", line)
