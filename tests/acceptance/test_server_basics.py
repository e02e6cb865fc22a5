"""`stageline serve` as a user meets it: health, tokens, limits, docs, refusing to bind."""

from __future__ import annotations

import subprocess
import sys

from server_fixtures import Server, http_get


def test_ok_answers_without_a_token(server: Server) -> None:
    answer = http_get(f"{server.url}/ok")
    assert answer.status_code == 200
    assert answer.json()["ok"] is True


def test_whoami_names_the_token_and_its_scope(server: Server) -> None:
    for scope, name in (("read", "reader"), ("decide", "decider"), ("admin", "admin")):
        with server.client(scope) as client:
            assert client.get("/v1/whoami").json() == {"name": name, "scope": scope}


def test_the_sdk_header_x_api_key_is_accepted(server: Server) -> None:
    answer = http_get(f"{server.url}/v1/whoami", headers={"x-api-key": server.tokens["read"]})
    assert answer.status_code == 200


def test_no_token_bad_token_and_revoked_token_get_401(server: Server) -> None:
    assert http_get(f"{server.url}/v1/whoami").status_code == 401
    bad = http_get(f"{server.url}/v1/whoami", headers={"Authorization": "Bearer sl_nope"})
    assert bad.status_code == 401
    assert "detail" in bad.json()
    token = server.create_token("short-lived", "read")
    headers = {"Authorization": f"Bearer {token}"}
    assert http_get(f"{server.url}/v1/whoami", headers=headers).status_code == 200
    server.cli("token", "revoke", "short-lived")
    assert http_get(f"{server.url}/v1/whoami", headers=headers).status_code == 401


def test_token_create_prints_the_token_alone_on_the_last_line(server: Server) -> None:
    out = server.cli("token", "create", "ci-bot", "--scope", "decide").stdout
    token = out.strip().splitlines()[-1]
    assert token.startswith("sl_") and " " not in token
    answer = http_get(f"{server.url}/v1/whoami", headers={"Authorization": f"Bearer {token}"})
    assert answer.json() == {"name": "ci-bot", "scope": "decide"}
    listed = server.cli("token", "list", "--json").stdout
    assert "ci-bot" in listed and token not in listed
    again = server.cli("token", "create", "ci-bot", check=False)
    assert again.returncode == 4 and "exists already" in again.stderr


def test_bodies_over_the_limit_get_413(server: Server) -> None:
    with server.client("admin") as client:
        answer = client.post(
            "/v1/runs",
            content=b"{" + b" " * 1_100_000 + b"}",
            headers={"content-type": "application/json"},
        )
    assert answer.status_code == 413
    assert "limit" in answer.json()["detail"]


def test_docs_are_served_without_a_cdn_and_only_with_a_token(server: Server) -> None:
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert http_get(f"{server.url}{path}").status_code == 401, path
    page = http_get(f"{server.url}/docs", headers=server.headers("read"))
    assert page.status_code == 200
    assert "cdn" not in page.text.lower()
    assert http_get(f"{server.url}/docs/assets/swagger-ui-bundle.js").status_code == 200
    schema = http_get(f"{server.url}/openapi.json", headers=server.headers("read")).json()
    assert schema["info"]["title"] == "stageline"


def test_serve_refuses_a_public_address_while_no_token_exists(tmp_path) -> None:
    env = {
        "STAGELINE_HOME": str(tmp_path / ".stageline"),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": ":".join(sys.path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "stageline.cli", "serve", "--host", "0.0.0.0", "--port", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 4
    assert "no API token exists yet" in done.stderr
    assert "Traceback" not in done.stderr
