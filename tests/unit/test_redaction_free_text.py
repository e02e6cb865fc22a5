"""Redaction of what people paste: tokens as URL user names, ``name=value`` secrets,
``Authorization`` headers and bearer tokens in free text."""

from __future__ import annotations

import json

import pytest

from stageline.events import Redactor
from stageline.ledger import Event

TOKEN = "ghp_live0123456789abcdefSECRET"


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        (
            f"git clone https://{TOKEN}@git.example.com/org/repo.git",
            TOKEN,
            "https://***@git.example.com/org/repo.git",
        ),
        ("push to https://abc123def456@git.example.com/x", "abc123def456", "git.example.com/x"),
        ("api_key=abcd1234secret then more", "abcd1234secret", "then more"),
        ("apikey: abcd1234secret", "abcd1234secret", "apikey: ***"),
        ("API-KEY = 'k3y-value'", "k3y-value", "API-KEY = '***'"),
        ("token=tok_12345678 rest", "tok_12345678", "token=*** rest"),
        ("secret=s3cr3tvalue", "s3cr3tvalue", "secret=***"),
        ("password=hunter22; user=bob", "hunter22", "user=bob"),
        ('config {"password": "hunter22", "user": "bob"}', "hunter22", '"user": "bob"'),
        ("export GITHUB_TOKEN=zz9_secret_value", "zz9_secret_value", "GITHUB_TOKEN=***"),
        (
            "Authorization: Basic dXNlcjpwYXNzd29yZA==",
            "dXNlcjpwYXNzd29yZA==",
            "Authorization: Basic ***",
        ),
        ("authorization: token raw-token-value", "raw-token-value", "authorization: token ***"),
        (
            'curl -H "Authorization: Bearer eyJhbGciOi.abc.def" https://x',
            "eyJhbGciOi",
            "Bearer ***",
        ),
        ("then use Bearer abc.def.ghi to call it", "abc.def.ghi", "to call it"),
        ("BEARER xyz123456", "xyz123456", "BEARER ***"),
        ("X-Api-Key: k-123456", "k-123456", "X-Api-Key: ***"),
    ],
)
def test_pasted_secrets_are_masked(text: str, secret: str, kept: str) -> None:
    clean = Redactor().text(text)
    assert secret not in clean, clean
    assert kept in clean, clean


@pytest.mark.parametrize(
    "text",
    [
        "input_tokens=500 output_tokens: 20",
        "max tokens: 20",
        "a basic understanding of tokens",
        "https://git.example.com/org/repo.git",
        "mail bob@example.com",
        "tokens=5",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert Redactor().text(text) is text


def test_masking_twice_changes_nothing_more() -> None:
    once = Redactor().text(f"https://{TOKEN}@h.example/x password=p4ss Bearer abc")
    assert Redactor().text(once) == once


def test_an_event_with_pasted_secrets_is_masked_everywhere() -> None:
    event = Event(
        run_id="r",
        kind="stage.log",
        message=f"cloning https://{TOKEN}@git.example",
        data={"note": "Authorization: Basic dXNlcjpwYXNz", "cmd": "run api_key=k-999x"},
    )
    text = json.dumps(Redactor().event(event).to_dict())
    for secret in (TOKEN, "dXNlcjpwYXNz", "k-999x"):
        assert secret not in text
