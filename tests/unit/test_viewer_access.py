"""`corral view` beyond loopback: with a token every page wants it (a bearer header, or the
cookie `?token=` sets once), and a non-loopback --host without one is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from corral.cli.main import app
from corral.cli.viewer.app import create_viewer

TOKEN = "s3cret-token"


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    return TestClient(create_viewer(tmp_path, token=TOKEN), base_url="http://127.0.0.1:8765")


@pytest.mark.parametrize("path", ["/", "/api/count", "/runs/r", "/episodes/e", "/runs/r/export.jsonl"])
def test_without_the_token_every_route_is_401_and_says_how_to_give_it(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 401
    assert "?token=TOKEN" in answer.text and TOKEN not in answer.text


def test_a_bearer_token_is_let_in_and_a_wrong_one_is_403(client: TestClient) -> None:
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/", headers={"Authorization": f" Bearer {TOKEN} "}).status_code == 200
    assert client.get("/", headers={"Authorization": TOKEN}).status_code == 403
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert client.get("/", cookies={"corral_view_8765": "wrong"}).status_code == 403


def test_the_token_in_the_query_once_sets_a_cookie_and_leaves_the_address(client: TestClient) -> None:
    assert client.get("/?token=wrong", follow_redirects=False).status_code == 403
    first = client.get(f"/api/count?run=r&token={TOKEN}", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/api/count?run=r"
    assert (
        "httponly" in first.headers["set-cookie"].lower() and "samesite=strict" in first.headers["set-cookie"].lower()
    )
    assert client.get("/").status_code == 200  # the cookie, from now on
    assert client.get("/api/count").json() == {"episodes": 0}


def test_without_a_token_the_viewer_answers_everyone_on_loopback(tmp_path: Path) -> None:
    assert TestClient(create_viewer(tmp_path)).get("/").status_code == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.org"])
def test_a_non_loopback_host_without_a_token_is_refused_naming_the_fix(
    tmp_path: Path, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[str] = []
    monkeypatch.setattr(uvicorn, "run", lambda viewer, host, **_: served.append(host))
    result = CliRunner().invoke(app, ["view", str(tmp_path), "--host", host], env={"CORRAL_TOKEN": None})
    assert served == [] and result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "--token-file" in line and "CORRAL_TOKEN" in line and "127.0.0.1" in line


def test_a_token_file_lets_a_non_loopback_host_serve_behind_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text(f"{TOKEN}\n")
    viewers: list[TestClient] = []
    monkeypatch.setattr(uvicorn, "run", lambda viewer, **_: viewers.append(TestClient(viewer)))
    result = CliRunner().invoke(
        app, ["view", str(tmp_path), "--host", "0.0.0.0", "--token-file", str(tmp_path / "token")]
    )
    assert result.exit_code == 0 and TOKEN not in result.stdout
    (client,) = viewers
    assert client.get("/").status_code == 401
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_a_token_file_that_is_empty_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    result = CliRunner().invoke(
        app, ["view", str(tmp_path), "--host", "0.0.0.0", "--token-file", str(tmp_path / "token")]
    )
    assert result.exit_code == 2 and "is empty" in result.stderr


def _two_runs(folder: Path) -> None:
    from corral.protocol.record_store import RecordWriter
    from corral.protocol.records import RolloutRecord

    for run in ("run-a", "run b"):
        writer = RecordWriter(folder, "rollouts", run=run)
        writer.write(RolloutRecord(episode_id=run, task_id="t", step=0, group=0, group_index=0, reward=1.0))
        writer.close()


def test_compare_prints_the_link_to_the_runs_overlaid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _two_runs(tmp_path)
    viewers: list[TestClient] = []
    monkeypatch.setattr(uvicorn, "run", lambda viewer, **_: viewers.append(TestClient(viewer)))
    result = CliRunner().invoke(app, ["view", str(tmp_path), "--compare", "run-a,run b"], env={"CORRAL_TOKEN": None})
    assert result.exit_code == 0, result.output
    link = "/compare?run=run-a&run=run+b"
    assert result.stdout.strip() == f"corral view: http://127.0.0.1:8765{link}"
    page = viewers[0].get(link)
    assert page.status_code == 200 and "run-a mean reward" in page.text and "run b mean reward" in page.text


@pytest.mark.parametrize(("runs", "said"), [("run-a,nope", "no run nope"), (",".join(["run-a"] * 5), "1 to 4 runs")])
def test_compare_refuses_a_run_not_recorded_or_past_four(
    tmp_path: Path, runs: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _two_runs(tmp_path)
    monkeypatch.setattr(uvicorn, "run", lambda viewer, **_: None)  # never served, when it works
    result = CliRunner().invoke(app, ["view", str(tmp_path), "--compare", runs], env={"CORRAL_TOKEN": None})
    assert result.exit_code == 2 and said in result.stderr
