"""How long a gate or question waits, and what its deadline does: durations and steps."""

from __future__ import annotations

from datetime import timedelta

import pytest

from stageline.errors import UsageError
from stageline.stages import deadline_steps, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        (" 1.5 h ", 5400.0),
        ("30", 30.0),
        (45, 45.0),
        (0.5, 0.5),
        (timedelta(minutes=2), 120.0),
    ],
)
def test_durations_read_as_seconds(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "gate 'g' deadline must be a duration, got True"),
        ("soon", "gate 'g' deadline must be a duration such as 90s, 15m, 2h or 1d, got 'soon'"),
        ("2 hours", "gate 'g' deadline must be a duration such as"),
        ("1y", "gate 'g' deadline must be a duration such as"),
        (0, "gate 'g' deadline must be positive, got 0"),
        ("0s", "gate 'g' deadline must be positive, got '0s'"),
        (-5, "gate 'g' deadline must be positive, got -5"),
        (timedelta(0), "gate 'g' deadline must be positive"),
    ],
)
def test_what_is_not_a_positive_duration_is_refused_naming_it(value: object, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_duration(value, "gate 'g' deadline")  # type: ignore[arg-type]
    assert str(info.value).startswith(message)


def test_the_default_name_in_the_message_is_deadline() -> None:
    with pytest.raises(UsageError, match=r"^deadline must be positive"):
        parse_duration(0)


@pytest.mark.parametrize(
    ("policy", "kind", "steps"),
    [
        ("reject", "gate", ("remind", "escalate", "reject")),
        ("park", "gate", ("remind", "escalate", "park")),
        ("fail", "question", ("remind", "escalate", "fail")),
        ("default", "question", ("remind", "escalate", "default")),
        (["park"], "gate", ("park",)),
        (["escalate", "fail"], "gate", ("escalate", "fail")),
        (("remind", "default"), "question", ("remind", "default")),
        (["remind", "escalate", "reject"], "gate", ("remind", "escalate", "reject")),
    ],
)
def test_a_deadline_policy_is_remind_escalate_then_a_final_step(
    policy: str | list[str], kind: str, steps: tuple[str, ...]
) -> None:
    assert deadline_steps(policy, kind) == steps


@pytest.mark.parametrize(
    ("policy", "kind"),
    [
        ("default", "gate"),  # a gate has no default answer
        ("reject", "question"),
        ([], "gate"),
        (["remind"], "gate"),
        (["escalate", "remind", "park"], "gate"),
        (["park", "remind"], "gate"),
        (["remind", "remind", "park"], "gate"),
        (["remind", "park", "fail"], "gate"),
    ],
)
def test_other_deadline_policies_are_refused(policy: str | list[str], kind: str) -> None:
    finals = "reject, park, fail" if kind == "gate" else "default, park, fail"
    expected = (
        f"on_deadline for a {kind} is one of {finals}, or a list: optionally remind, then "
        f"escalate, then one of those; got {policy!r}"
    )
    with pytest.raises(UsageError) as info:
        deadline_steps(policy, kind)
    assert str(info.value) == expected
