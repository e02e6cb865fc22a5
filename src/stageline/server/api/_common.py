"""What the routers share: path parameters, auth dependencies, model conversions."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from fastapi import Depends, Path

from stageline.errors import TemplateNotFound
from stageline.ledger import Run, Wait, WaitStatus
from stageline.names import RUN_ID_PATTERN
from stageline.runner import Runner, RunSummary
from stageline.server._advancer import Advancer
from stageline.server._auth import require_scope
from stageline.server._models import (
    TEMPLATE_NAME,
    ErrorOut,
    NodeRecordOut,
    RunOut,
    SummaryOut,
    WaitOut,
)
from stageline.server._state import get_advancer, get_runner
from stageline.templates import Template, list_templates

__all__ = [
    "Admin",
    "AdvancerDep",
    "Decider",
    "Reader",
    "RunId",
    "RunnerDep",
    "TemplateName",
    "find_template",
    "jsonable",
    "run_out",
    "summary_out",
    "wait_out",
]

RunnerDep = Annotated[Runner, Depends(get_runner)]
AdvancerDep = Annotated[Advancer, Depends(get_advancer)]
Reader = Annotated[str, Depends(require_scope("read"))]
Decider = Annotated[str, Depends(require_scope("decide"))]
Admin = Annotated[str, Depends(require_scope("admin"))]
RunId = Annotated[str, Path(pattern=f"^{RUN_ID_PATTERN.pattern}$", description="A run id.")]
TemplateName = Annotated[str, Path(pattern=TEMPLATE_NAME, description="A template's name.")]

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "A body that cannot be parsed, or a request that "
          "makes no sense (the detail says why)"},
    401: {"model": ErrorOut, "description": "No token, or a bad or revoked one"},
    403: {"model": ErrorOut, "description": "The token's scope does not allow this"},
    413: {"model": ErrorOut, "description": "The body is over the limit ([server] "
          "max_body_bytes)"},
}


def find_template(runner: Runner, name: str) -> Template:
    """A template found *by name* (built-ins, entry points, the templates folder): a name from
    outside never reaches the file system as a path. Unknown: 404."""
    if not re.fullmatch(TEMPLATE_NAME, name):
        raise TemplateNotFound(name, [i.name for i in list_templates(
            runner.settings.template_dirs)])
    return runner.load(name)


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (state may hold dates, models, sets: they become text)."""
    return json.loads(json.dumps(value, default=str))


def run_out(run: Run) -> RunOut:
    return RunOut.model_validate(run.to_dict())


def wait_out(wait: Wait) -> WaitOut:
    return WaitOut.model_validate({**wait.to_dict(), "state_hash": wait.state_hash})


def summary_out(summary: RunSummary) -> SummaryOut:
    return SummaryOut(
        run=run_out(summary.run),
        records=[NodeRecordOut.model_validate(r.to_dict()) for r in summary.records],
        state=jsonable(summary.state),
        waiting=[wait_out(w) for w in summary.waits if w.status is WaitStatus.PENDING],
    )
