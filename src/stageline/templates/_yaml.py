"""Templates written in YAML, mapped onto the ``Template`` builder; errors name file and line.

```yaml
name: review_pipeline         # required
version: "2"                  # optional, default "1" (a string or an integer)
description: ...              # optional
state:                        # the state schema; each key: a type name or a mapping
  topic: {type: str, required: true}       # types: str, int, float, bool, list, dict, any;
                                           # required: a run cannot start without it
  reviews: {type: list, reducer: append}   # append (operator.add), merge (dict merge),
                                           # or an import path to a (current, update) callable
stages:                       # node name -> stage reference, or a mapping
  research: mypkg.stages:research          # registered name, or module:attr / module.attr
  outline: {use: mypkg.stages:outline, retry: 3, timeout: 30, writes: [outline]}
  draft: {use: [mypkg.stages:draft_fast, mypkg.stages:draft_careful], capability: writing}
  # use: a list: a learned router picks one per run by outcomes (cost_weight: 0.5 optional)
  # retry: max attempts, or a mapping of RetryPolicy fields (retry_on: import path(s));
  # timeout: seconds; writes: the state keys the stage writes (checked for fan-in reducers,
  # and at run time: a result with another key fails the node)
start: research               # optional; default: the first stage listed
edges:                        # [from, to] pairs or {from: a, to: b}; END ends the run
  - [research, outline]
fanout:                       # run `to` in parallel after `from`; `join` runs once all finish
  - {from: draft, to: [critic_a, critic_b], join: aggregate}
routes:                       # after `from`, go where `by(state)` says
  - {from: review, by: mypkg.routes:route_review, to: {plan: plan, done: END}}  # or a list
loops:                        # every cycle needs one; `head` runs at most `max` times per run
                              # (a node heads one loop; a gate's changes count in it)
  - {name: plan_review, head: plan, max: 3, on_exhausted: parked}   # name defaults to head
gates:                        # node name -> a gate; its edge out is where an approval goes
  approval: {changes_to: draft, max_changes: 3, reject_to: rejected, show: [summary],
             deadline: 2d, on_deadline: reject}   # reject | park | fail, or [remind, ..., x]
questions:                    # node name -> a question node (answers go to `history`)
  clarify:
    questions:                # text / a choice / a JSON value; `default` for the policy
      - {id: scope, text: "What is in scope?"}
      - {id: size, text: "How big?", choices: [small, large], default: small}
      - {id: limits, text: "Limits?", schema: {type: object}, required: false}
    # or ask: mypkg.stages:author   # (state, history, ctx) -> questions or None, per turn
    max_turns: 1              # sets asked in a row, while `ask` still has questions
    history: qa_history       # state key for the sets and answers (default qa_history)
    answers: answers          # optional: state key for the latest answers by question id
    deadline: 1d              # seconds or 90s / 15m / 2h / 1d; default 24h
    on_deadline: default      # default | park | fail, or [remind, escalate, x]
```
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Required, TypedDict

import yaml
from langgraph.types import RetryPolicy

from stageline.errors import StageNotFound, TemplateError, UsageError
from stageline.plaindata import shown
from stageline.stages import RESERVED_KEYS, Budget, Stage, router_stage
from stageline.templates._builder import Template
from stageline.templates._project import find_stage
from stageline.templates._yaml_human import read_human
from stageline.templates._yaml_read import (
    _COUNT,
    _FLAG,
    _NUMBER,
    _LineLoader,
    _Map,
    _ok,
    _Reader,
)

__all__ = ["load_yaml_template"]

TOP_KEYS = (
    "name",
    "version",
    "description",
    "state",
    "stages",
    "gates",
    "questions",
    "start",
    "edges",
    "fanout",
    "routes",
    "loops",
    "budget",
)
TYPES: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "list": list,
    "dict": dict,
    "any": Any,
}
_RETRY_FIELDS = {
    "initial_interval": _NUMBER,
    "backoff_factor": _NUMBER,
    "max_interval": _NUMBER,
    "max_attempts": _COUNT,
    "jitter": _FLAG,
}


class _Reducer:
    """A reducer with a stable ``repr``, so the template digest is the same in every process."""

    def __init__(self, fn: Callable[[Any, Any], Any], ref: str) -> None:
        self.fn, self.ref = fn, ref
        self.__name__ = getattr(fn, "__name__", ref)  # LangGraph compares reducers by name

    def __call__(self, left: Any, right: Any) -> Any:
        return self.fn(left, right)

    def __repr__(self) -> str:
        return f"reducer:{self.ref}"


def _merge(left: Any, right: Any) -> dict[Any, Any]:
    """The ``merge`` reducer: the current dict updated with the new one."""
    return {**(left or {}), **(right or {})}


class _TemplateReader(_Reader):
    """Reads one YAML template; every mistake is a ``TemplateError`` at a line of the file."""

    # -- sections ---------------------------------------------------------------------------

    def state(self, name: str, spec: Any, line: int) -> type[Any]:
        """The state schema: a ``TypedDict``, reducers as ``Annotated`` metadata."""
        fields: dict[str, Any] = {}
        spec = _Map(line) if spec is None else self.mapping(spec, "state", line)
        for key, decl in spec.items():
            at = self.line = spec.at(key)
            if not isinstance(key, str) or key in RESERVED_KEYS:
                self.fail(
                    f"bad state key {key!r} (a string other than "
                    f"{' or '.join(map(repr, RESERVED_KEYS))})",
                    at,
                )
            type_name, reducer, type_at, reducer_at = decl, None, at, at
            required = False
            if isinstance(decl, _Map):
                decl = self.mapping(decl, f"state key {key!r}", at, ("type", "reducer", "required"))
                type_name, reducer = decl.get("type", "any"), decl.get("reducer")
                type_at, reducer_at = decl.at("type"), decl.at("reducer")
                required = decl.get("required", False)
                if not isinstance(required, bool):
                    self.fail(f"state key {key!r}: `required` must be true or false", at)
            if not isinstance(type_name, str) or type_name not in TYPES:
                self.fail(
                    f"state key {key!r} has unknown type {type_name!r}; types: {', '.join(TYPES)}",
                    type_at,
                )
            fields[key] = Required[TYPES[type_name]] if required else TYPES[type_name]
            if reducer is not None:
                fields[key] = Annotated[fields[key], self.reducer(reducer, key, reducer_at)]
        return TypedDict(name, fields, total=False)  # type: ignore[operator,no-any-return]

    def reducer(self, ref: Any, key: str, line: int) -> Callable[[Any, Any], Any]:
        """``append``, ``merge`` or the two-argument callable at an import path."""
        if ref in ("append", "merge"):
            return operator.add if ref == "append" else _Reducer(_merge, "merge")
        if not isinstance(ref, str) or (":" not in ref and "." not in ref):
            self.fail(
                f"state key {key!r} has unknown reducer {ref!r}; use append, merge "
                "or an import path (module:function)",
                line,
            )
        return _Reducer(self.resolve(ref, f"reducer of state key {key!r}", line, 2), ref)

    def stage(self, node: Any, spec: Any, line: int, state_keys: list[str]) -> Stage:
        """The stage a ``stages:`` entry names, with its retry, timeout and writes applied."""
        self.line = line
        if not isinstance(node, str) or node in ("END", "end") or ":" in node or "|" in node:
            self.fail(f"bad node name {node!r}: a string, not END, without ':' or '|'", line)
        opts = _Map(line)
        if isinstance(spec, _Map):
            keys = ("use", "retry", "timeout", "writes", "capability", "cost_weight")
            opts = self.mapping(spec, f"stage {node!r}", line, keys, ("use",))
        if isinstance(opts.get("use"), list):
            made = self.routed(node, opts)
        else:
            ref = self.text(opts.get("use", spec), f"the stage of node {node!r}", opts.at("use"))
            made = self.find(node, ref, opts.at("use"))
        for opt in ("retry", "timeout", "writes"):
            value, at = opts.get(opt), opts.at(opt)
            if opt == "writes" and value is not None:
                value = [value] if isinstance(value, str) else self.names(value, "writes", at)
                if missing := [k for k in value if k not in state_keys]:
                    self.fail(
                        f"node {node!r} writes {', '.join(map(repr, missing))}, not declared "
                        f"under state: ({', '.join(state_keys) or 'none'})",
                        at,
                    )
            elif opt == "timeout" and value is not None and not _ok(value, _NUMBER):
                self.fail(
                    f"node {node!r}: timeout must be a number of seconds, got {shown(value)}", at
                )
            elif opt == "retry" and value is not None and not isinstance(value, int):
                value = self.retry(f"node {node!r}: retry", value, at)
            try:
                made = made if value is None else made.with_options(**{opt: value})
            except (UsageError, TypeError, ValueError) as exc:
                self.fail(f"node {node!r}: bad {opt}: {exc}", at)
        return made

    def find(self, node: str, ref: str, line: int) -> Stage:
        """The stage ``ref`` names, or a ``TemplateError`` saying why not."""
        try:
            return find_stage(ref)
        except Exception as exc:
            reason = str(exc).removeprefix(f"unknown stage {ref!r}: ")
            if not isinstance(exc, StageNotFound):
                reason = f"cannot import it: {type(exc).__name__}: {exc}"
            self.fail(f"unknown stage {ref!r} for node {node!r}: {reason}", line)

    def routed(self, node: str, opts: _Map) -> Stage:
        """``use: [a, b]``: a learned router choosing among alternatives by their outcomes."""
        at = opts.at("use")
        refs = self.names(opts["use"], f"the alternatives of node {node!r}", at)
        found = {ref.replace(":", ".").rpartition(".")[2]: self.find(node, ref, at) for ref in refs}
        if len(found) != len(refs) or len(found) < 2:
            self.fail(f"node {node!r}: a router needs two or more alternatives, named apart", at)
        capability = opts.get("capability") or next(iter(found.values())).capability
        weight = opts.get("cost_weight", 0.0)
        if not isinstance(capability, str) or not _ok(weight, _NUMBER):
            self.fail(f"node {node!r}: a router needs a capability and a numeric cost_weight", at)
        try:
            return router_stage(capability, found, name=node, cost_weight=float(weight))
        except UsageError as exc:
            self.fail(f"node {node!r}: {exc}", at)

    def retry(self, what: str, value: Any, line: int) -> dict[str, Any]:
        """A mapping of ``RetryPolicy`` fields, checked; ``retry_on`` names exception classes."""
        spec = self.mapping(
            value, f"{what} (a number of attempts or a mapping)", line, RetryPolicy._fields
        )
        for key, kind in _RETRY_FIELDS.items():
            if key in spec and not _ok(spec[key], kind):
                self.fail(f"{what} {key} must be {kind}, got {shown(spec[key])}", spec.at(key))
        if (refs := spec.get("retry_on")) is None:
            return dict(spec)
        at, one = spec.at("retry_on"), isinstance(refs, str)
        found = [
            self.resolve(r, f"{what} retry_on", at, 1)
            for r in ([refs] if one else self.names(refs, f"{what} retry_on", at))
        ]
        return {**spec, "retry_on": found[0] if one else tuple(found)}

    # -- the whole file ---------------------------------------------------------------------

    def load(self) -> Template:
        """Parse, build and validate the template."""
        try:
            data = yaml.load(self.path.read_bytes(), Loader=_LineLoader)
        except OSError as exc:
            self.fail(f"cannot read the template: {exc}", None)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            text = ", ".join(filter(None, [exc.context, exc.problem]))
            self.fail(
                f"invalid YAML: {text}" + (f" (column {mark.column + 1})" if mark else ""),
                mark.line + 1 if mark else None,
            )
        except yaml.YAMLError as exc:
            self.fail(f"invalid YAML: {exc}", None)
        if data is None:
            self.fail("the file is empty; a template needs `name` and `stages`", 1)
        top = self.mapping(
            data, "a template", getattr(data, "line", 1), TOP_KEYS, ("name", "stages")
        )
        try:
            return self.build(top)
        except TemplateError:
            raise
        except Exception as exc:  # an odd value no check foresaw: still name the entry's line
            self.fail(f"{type(exc).__name__}: {str(exc)[:300]}", self.line)

    def build(self, top: _Map) -> Template:
        """The template, section by section, then ``validate()``."""
        name = self.text(top["name"], "name", top.at("name"))
        version, description = top.get("version", "1"), top.get("description") or ""
        if isinstance(version, bool) or not isinstance(version, str | int):
            self.fail(
                f"version must be a string (quote it), got {shown(version)}", top.at("version")
            )
        if not isinstance(description, str):
            self.fail("description must be a string", top.at("description"))
        state = self.state(name, top.get("state"), top.at("state"))
        try:
            budget = Budget.of(top.get("budget"))
        except (UsageError, TypeError, ValueError) as exc:
            self.fail(f"bad budget: {exc}", top.at("budget"))
        template = Template(
            name,
            state=state,
            version=str(version),
            description=description,
            source=self.src,
            budget=budget,
        )
        stages = self.mapping(top["stages"], "stages", top.at("stages"))
        if not stages:
            self.fail("`stages` lists no stages", top.at("stages"))
        for node, spec in stages.items():
            made = self.stage(node, spec, stages.at(node), list(state.__annotations__))
            template.add_stage(node, made, where=self.where(stages.at(node)))
        self.loops(template, top)  # first: a gate's changes reuse a loop of their head
        read_human(self, template, top)
        if "start" in top:
            start = self.text(top["start"], "start", top.at("start"))
            template.set_start(start, where=self.where(top.at("start")))
        for item, line in self.items(top, "edges"):
            if isinstance(item, _Map):
                item = self.mapping(item, "an edge", line, ("from", "to"), ("from", "to"))
                item = [item["from"], item["to"]]
            if not isinstance(item, list) or len(item) != 2:
                self.fail(f"an edge is [from, to] or {{from: a, to: b}}, got {shown(item)}", line)
            source, target = (self.text(n, "an edge end", line) for n in item)
            template.add_edge(source, target, where=self.where(line))
        fanout_keys = ("from", "to", "join")
        for m, line in self.items(top, "fanout", "a fan-out", fanout_keys, fanout_keys[:2]):
            join = self.text(m["join"], "join", line) if "join" in m else None
            template.add_fanout(
                self.text(m["from"], "fan-out from", line),
                self.names(m["to"], "fan-out to", line),
                join=join,
                where=self.where(line),
            )
        route_keys = ("from", "by", "to")
        for m, line in self.items(top, "routes", "a route", route_keys, route_keys):
            source = self.text(m["from"], "route from", line)
            router = self.resolve(m["by"], f"router of the route from {source!r}", line, 1)
            targets: dict[str, str] | list[str] = {}
            if not isinstance(to := m["to"], _Map):
                targets = self.names(to, "route to", line)
            for key, value in to.items() if isinstance(to, _Map) else ():
                assert isinstance(targets, dict)  # `yes:` reads as True: take "True" and "yes"
                targets[str(key)] = self.text(value, "route target", to.at(key))
                targets.setdefault(to.raw[key], targets[str(key)])
            template.add_route(source, router, targets, where=self.where(line))
        template.validate()
        return template

    def loops(self, template: Template, top: _Map) -> None:
        """The ``loops:`` section; a loop's name defaults to its head."""
        seen: set[str] = set()
        for m, line in self.items(
            top, "loops", "a loop", ("name", "head", "max", "on_exhausted"), ("head", "max")
        ):
            head = self.text(m["head"], "loop head", line)
            name = self.text(m.get("name", head), "loop name", line)
            if name in seen:
                self.fail(f"loop {name!r} is declared twice", line)
            if not _ok(m["max"], _COUNT):
                self.fail(
                    f"loop {name!r}: `max` must be {_COUNT}, got {shown(m['max'])}", m.at("max")
                )
            seen.add(name)
            parked = m.get("on_exhausted")
            template.add_loop(
                name,
                head=head,
                max_iterations=m["max"],
                where=self.where(line),
                on_exhausted=None if parked is None else self.text(parked, "on_exhausted", line),
            )


def load_yaml_template(path: Path) -> Template:
    """The template a YAML file describes, validated; every mistake is a ``TemplateError``."""
    return _TemplateReader(Path(path)).load()
