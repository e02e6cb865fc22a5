"""stageline.toml and STAGELINE_* are checked by a schema: type, unknown key, range, line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from stageline.config import InterruptsConfig, ServerConfig, SlackConfig, load_settings
from stageline.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stageline.toml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("lease_ttl = [1]\n", 1, "lease_ttl: input should be a valid number (got [1])"),
        ("# a comment\nhome = 5\n", 2, "home: input should be a valid string (got 5)"),
        ("database_url = 5\n", 1, "database_url: input should be a valid string"),
        ("model = 5\n", 1, "model: input should be a valid string"),
        (
            'home = "h"\ndatabse_url = "sqlite:///x"\n',
            2,
            "databse_url: unknown key (did you mean 'database_url'?)",
        ),
        ("lease_ttl = -1\n", 1, "lease_ttl: input should be greater than 0 (got -1)"),
        ("lease_ttl = true\n", 1, "lease_ttl: input should be a valid number"),
        ("lease_ttl = nan\n", 1, "lease_ttl: input should be a finite number"),
        ('template_dirs = "templates"\n', 1, "template_dirs: input should be a valid list"),
        ('[stageline]\nhome = ".s"\nlease_ttl = "30"\n', 3, "lease_ttl: input should be a valid"),
        ('services = "not a callable"\n', 1, "services: must be 'module:callable'"),
        (
            'model = "x"\n\n[server]\nmax_body_bytes = 0\n',
            4,
            "server.max_body_bytes: input should be greater than 0",
        ),
        ('[slack]\nchanel = "#ops"\n', 2, "slack.chanel: unknown key (did you mean 'channel'?)"),
        ('[slack]\ndeciders = "U1"\n', 2, "slack.deciders: input should be a valid list"),
        ('[[sinks]]\ntype = "console"\n[[sinks]]\n', None, None),
        ("sinks = 5\n", 1, "sinks: input should be a valid list"),
        (
            'home = "h"\n[interrupts]\ndeadline = "later"\n',
            3,
            "interrupts.deadline: must be a duration such as 90s, 15m, 2h or 1d (more than 0)",
        ),
        ("[interrupts]\ndeadline = -5\n", 2, "interrupts.deadline: must be a duration"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_bad_file_names_file_line_and_key(
    tmp_path: Path, text: str, line: int | None, says: str | None
) -> None:
    path = write(tmp_path, text)
    if says is None:
        load_settings(cwd=tmp_path, env={})
        return
    with pytest.raises(ConfigError) as caught:
        load_settings(cwd=tmp_path, env={})
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert says in str(caught.value)


def test_an_unknown_key_without_a_close_match_lists_the_known(tmp_path: Path) -> None:
    write(tmp_path, "zzz = 1\n")
    with pytest.raises(ConfigError, match="zzz: unknown key; known keys: home, database_url"):
        load_settings(cwd=tmp_path, env={})


def test_a_huge_value_is_not_echoed(tmp_path: Path) -> None:
    write(tmp_path, f'lease_ttl = "{"9" * 100_000}"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(cwd=tmp_path, env={})
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"STAGELINE_LEASE_TTL": "abc"}, "STAGELINE_LEASE_TTL: input should be a valid number"),
        ({"STAGELINE_LEASE_TTL": "-3"}, "STAGELINE_LEASE_TTL: input should be greater than 0"),
        ({"STAGELINE_LEASE_TTL": "inf"}, "STAGELINE_LEASE_TTL: input should be a finite number"),
        ({"STAGELINE_SERVICES": "x y"}, "STAGELINE_SERVICES: must be 'module:callable'"),
        (
            {"STAGELINE_INTERRUPTS_ON_DEADLINE": "explode"},
            "STAGELINE_INTERRUPTS_ON_DEADLINE: input should be 'park' or 'fail'",
        ),
        (
            {"STAGELINE_INTERRUPTS_DEADLINE": "soon"},
            "STAGELINE_INTERRUPTS_DEADLINE: must be a duration such as 90s, 15m, 2h or 1d",
        ),
        ({"STAGELINE_INTERRUPTS_DEADLINE": "0"}, "STAGELINE_INTERRUPTS_DEADLINE: must be a"),
        ({"STAGELINE_SERVER_WORKERS": "0"}, "STAGELINE_SERVER_WORKERS: input should be greater"),
        ({"STAGELINE_SERVER_WORKERS": "two"}, "STAGELINE_SERVER_WORKERS: input should be a valid"),
    ],
)
def test_environment_values_are_checked_by_the_same_schema(
    tmp_path: Path, env: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError, match="environment variable " + says.replace("(", r"\(")):
        load_settings(cwd=tmp_path, env=env)


def test_a_good_file_and_environment_resolve(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
        home = "state"
        model = "offline"
        lease_ttl = 12
        template_dirs = ["t1", "t2"]
        services = "myapp.services:make"
        public_url = "https://stageline.example.com"

        [server]
        max_body_bytes = 2048

        [slack]
        bot_token_env = "SLACK_BOT_TOKEN"
        signing_secret_env = "SLACK_SIGNING_SECRET"
        channel = "#runs"
        deciders = ["U1", "U2"]
        intake_command = "/stageline"
        intake_template = "blog_post"
        intake_input = "topic"

        [[sinks]]
        type = "console"
        """,
    )
    (tmp_path / "sub").mkdir()  # found by searching upward
    settings = load_settings(
        cwd=tmp_path / "sub", env={"STAGELINE_LEASE_TTL": "7.5", "UNRELATED": "x"}
    )
    assert settings.home == tmp_path / "state"
    assert settings.database_url == f"sqlite:///{tmp_path / 'state' / 'stageline.db'}"
    assert settings.model is None and settings.lease_ttl == 7.5
    assert settings.template_dirs == (tmp_path / "t1", tmp_path / "t2")
    assert settings.services == "myapp.services:make"
    assert settings.public_url == "https://stageline.example.com"
    assert settings.server == ServerConfig(max_body_bytes=2048)
    assert settings.slack.deciders == ["U1", "U2"] and settings.slack.channel == "#runs"
    assert settings.sinks == ({"type": "console"},)


def test_defaults_without_a_file(tmp_path: Path) -> None:
    settings = load_settings(cwd=tmp_path, env={})
    assert settings.lease_ttl == 30.0 and settings.model is None and settings.sinks == ()
    assert settings.server.max_body_bytes == 1_000_000
    assert settings.slack == SlackConfig() and settings.services is None


def test_the_interrupts_section_is_set_by_file_and_environment(tmp_path: Path) -> None:
    assert load_settings(cwd=tmp_path, env={}).interrupts == InterruptsConfig()
    write(tmp_path, '[interrupts]\ndeadline = "2h"\n')
    assert load_settings(cwd=tmp_path, env={}).interrupts == InterruptsConfig(deadline="2h")
    env = {"STAGELINE_INTERRUPTS_ON_DEADLINE": "fail"}  # the file's deadline stays
    assert load_settings(cwd=tmp_path, env=env).interrupts == InterruptsConfig(
        deadline="2h", on_deadline="fail"
    )
    env = {"STAGELINE_INTERRUPTS_DEADLINE": "90", "STAGELINE_INTERRUPTS_ON_DEADLINE": ""}
    assert load_settings(cwd=tmp_path, env=env).interrupts == InterruptsConfig(deadline="90")


def test_server_workers_are_set_by_file_and_environment(tmp_path: Path) -> None:
    assert load_settings(cwd=tmp_path, env={}).server.workers == 1
    write(tmp_path, "[server]\nmax_body_bytes = 2048\nworkers = 3\n")
    assert load_settings(cwd=tmp_path, env={}).server == ServerConfig(
        max_body_bytes=2048, workers=3
    )
    env = {"STAGELINE_SERVER_WORKERS": "2"}  # the file's body limit stays
    assert load_settings(cwd=tmp_path, env=env).server == ServerConfig(
        max_body_bytes=2048, workers=2
    )


def test_an_empty_variable_counts_as_unset(tmp_path: Path) -> None:
    write(tmp_path, "lease_ttl = 9\n")
    assert load_settings(cwd=tmp_path, env={"STAGELINE_LEASE_TTL": ""}).lease_ttl == 9


def test_sqlite_synchronous_is_full_unless_set_and_rides_in_the_url(tmp_path: Path) -> None:
    assert load_settings(cwd=tmp_path, env={}).database_url.endswith("stageline.db")
    write(tmp_path, 'sqlite_synchronous = "normal"\n')
    settings = load_settings(cwd=tmp_path, env={})
    assert settings.sqlite_synchronous == "normal"
    assert settings.database_url.endswith("stageline.db?synchronous=normal")
    env = {"STAGELINE_SQLITE_SYNCHRONOUS": "full"}
    assert load_settings(cwd=tmp_path, env=env).database_url.endswith("stageline.db")
    given = {"STAGELINE_DATABASE_URL": "sqlite:///x.db?busy_timeout=2&synchronous=full"}
    assert load_settings(cwd=tmp_path, env=given).database_url == given["STAGELINE_DATABASE_URL"]
    pg = {"STAGELINE_DATABASE_URL": "postgresql://u@h/db"}
    assert load_settings(cwd=tmp_path, env=pg).database_url == "postgresql://u@h/db"


def test_a_sqlite_synchronous_level_sqlite_lacks_is_refused(tmp_path: Path) -> None:
    write(tmp_path, 'sqlite_synchronous = "off"\n')
    with pytest.raises(ConfigError, match="sqlite_synchronous: input should be 'full' or 'normal'"):
        load_settings(cwd=tmp_path, env={})
