"""``[github]`` of stageline.toml: checked like every section, secrets read from the variables
it names, and only the listed repositories are ever touched."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from stageline.config import load_settings
from stageline.errors import ConfigError
from stageline.forge import github_settings, sign, verify_signature


def settings_of(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    (tmp_path / "stageline.toml").write_text(textwrap.dedent(text).lstrip("\n"))
    return load_settings(tmp_path, env={})


GOOD = """
[github]
api_url = "https://github.example.com/api/v3/"
intake_label = "build-me"
poll_interval = "2m"
ci_timeout = "45m"

[github.repositories."acme/app"]
checkout = "checkouts/app"
workflow = "ci.yml"
merge = true
"""


def test_a_full_table_resolves_paths_durations_and_secrets(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, GOOD)
    env = {"GITHUB_TOKEN": "ghp-secret", "GITHUB_WEBHOOK_SECRET": "hook"}
    forge = github_settings(settings, env)
    assert forge.api_url == "https://github.example.com/api/v3"
    assert forge.token == "ghp-secret" and forge.webhook_secret == "hook"
    assert forge.intake_label == "build-me" and forge.poll_interval == 120.0
    assert forge.ci_timeout == 45 * 60.0
    repo = forge.repository("acme/app")
    assert repo.checkout == (tmp_path / "checkouts/app").resolve()
    assert (repo.owner, repo.repo, repo.base, repo.workflow, repo.merge) == (
        "acme",
        "app",
        "main",
        "ci.yml",
        True,
    )
    assert "ghp-secret" not in repr(forge) and "hook" not in repr(forge)


def test_defaults_and_a_missing_webhook_secret(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, '[github.repositories."a/b"]\ncheckout = "/x"\n')
    forge = github_settings(settings, {"GITHUB_TOKEN": "t"})
    assert forge.api_url == "https://api.github.com"
    assert forge.webhook_secret is None and forge.intake_label == "stageline"
    assert forge.poll_interval == 30.0 and forge.poll_issues is False
    assert forge.ci_timeout == 2 * 3600.0
    assert forge.repository("a/b").workflow is None


def test_no_repositories_or_no_token_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no \[github\.repositories"):
        github_settings(settings_of(tmp_path, "[github]\n"), {"GITHUB_TOKEN": "t"})
    settings = settings_of(tmp_path, GOOD.replace("[github]\n", '[github]\ntoken_env = "GH"\n'))
    with pytest.raises(ConfigError, match=r"github\.token_env: .* GH \(the GitHub token\)"):
        github_settings(settings, {"GITHUB_TOKEN": "t"})


def test_a_github_app_signs_in_with_its_key_instead_of_a_token(tmp_path: Path) -> None:
    """app_id + installation_id: the App's private key (PEM) from app_private_key_env, kept
    out of repr; a PEM on one line with its breaks written as \\n is taken too."""
    text = GOOD.replace("[github]\n", "[github]\napp_id = 12\ninstallation_id = 34\n")
    pem = "-----BEGIN PRIVATE KEY-----\nMIIsecret\n-----END PRIVATE KEY-----"
    forge = github_settings(settings_of(tmp_path, text), {"GITHUB_APP_PRIVATE_KEY": pem})
    assert forge.token is None and forge.app is not None
    assert (forge.app.app_id, forge.app.installation_id) == (12, 34)
    assert forge.app.private_key == pem + "\n" and "MIIsecret" not in repr(forge)
    one_line = {"GITHUB_APP_PRIVATE_KEY": pem.replace("\n", "\\n")}
    assert github_settings(settings_of(tmp_path, text), one_line).app == forge.app
    with pytest.raises(ConfigError, match=r"GITHUB_APP_PRIVATE_KEY .* is not set"):
        github_settings(settings_of(tmp_path, text), {"GITHUB_TOKEN": "t"})
    with pytest.raises(ConfigError, match=r"GITHUB_APP_PRIVATE_KEY .* is not a PEM private key"):
        github_settings(settings_of(tmp_path, text), {"GITHUB_APP_PRIVATE_KEY": "12"})
    with pytest.raises(ConfigError, match=r"app_id and installation_id go together"):
        settings_of(tmp_path, GOOD.replace("[github]\n", "[github]\napp_id = 12\n"))


def test_a_repository_not_listed_is_refused_by_name(tmp_path: Path) -> None:
    forge = github_settings(settings_of(tmp_path, GOOD), {"GITHUB_TOKEN": "t"})
    with pytest.raises(ConfigError, match=r"'evil/repo' is not in \[github\.repositories\]"):
        forge.repository("evil/repo")


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("[github]\ntoken = 'ghp'\n", 2, "github.token: unknown key (did you mean 'token_env'?)"),
        ("[github]\napi_url = 'ftp://x'\n", 2, "github.api_url: must be an http(s) URL"),
        ("[github]\npoll_interval = 'often'\n", 2, "github.poll_interval: must be a duration"),
        ("[github]\nci_timeout = 'never'\n", 2, "github.ci_timeout: must be a duration"),
        ("[github]\nci_timeout = '0s'\n", 2, "github.ci_timeout: must be a duration"),
        ("[github]\npoll_issues = 'yes'\n", 2, "github.poll_issues: input should be a valid bool"),
        (
            '[github.repositories."acme/app"]\ncheckout = "x"\nchekout = "y"\n',
            3,
            "github.repositories.acme/app.chekout: unknown key (did you mean 'checkout'?)",
        ),
        ('[github.repositories."acme/app"]\nbase = "main"\n', None, "checkout: field required"),
        (
            '[github.repositories."acme/app"]\ncheckout = "x"\nmerge = "no"\n',
            3,
            "github.repositories.acme/app.merge: input should be a valid bool",
        ),
        (
            '[github.repositories."../etc"]\ncheckout = "x"\n',
            None,
            "github.repositories: '../etc' is not a repository name such as 'acme/app'",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_bad_github_table_names_the_key(
    tmp_path: Path, text: str, line: int | None, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_of(tmp_path, text)
    said = str(caught.value)
    assert says in said, said
    if line is not None:
        assert f"stageline.toml:{line}: " in said, said


def test_signatures_are_githubs_hmac_sha256() -> None:
    body = b'{"zen": "Keep it logically awesome."}'
    # GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!"
    assert (
        sign("It's a Secret to Everybody", b"Hello, World!")
        == "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )
    good = sign("s3cret", body)
    assert verify_signature("s3cret", body, good)
    assert not verify_signature("s3cret", body + b" ", good)
    assert not verify_signature("other", body, good)
    assert not verify_signature("s3cret", body, None)
    assert not verify_signature("s3cret", body, "")
    assert not verify_signature("s3cret", body, good.replace("sha256=", "sha1="))
    assert not verify_signature("", body, sign("", body))


def test_issue_run_ids_are_run_ids_and_unique_per_issue() -> None:
    from stageline.names import is_run_id
    from stageline.server.forge import issue_run_id

    assert issue_run_id("acme/app", 42) == "gh-acme-app-42"
    assert issue_run_id("acme/app.js", 1) == "gh-acme-app.js-1"
    long = "o" * 39 + "/" + "r" * 100
    ids = {issue_run_id(long, 7), issue_run_id(long + "x", 7), issue_run_id(long, 8)}
    assert len(ids) == 3 and all(is_run_id(i) and len(i) <= 64 for i in ids)


def test_the_cli_and_the_server_do_not_import_githubkit_until_a_client_is_made() -> None:
    import subprocess
    import sys

    code = (
        "import sys, stageline.cli._app, stageline.server, stageline.forge\n"
        "assert 'githubkit' not in sys.modules, 'githubkit imported'\n"
        "stageline.forge.GitHubClient\n"
        "assert 'githubkit' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
