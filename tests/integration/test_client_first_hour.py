"""What a new user meets first with `Bundle(url)`: a URL given the wrong way, a token missing or
wrong, a server that is not there, a split with nothing to train on; each a clear error."""

from __future__ import annotations

import logging
import socket

import httpx
import pytest

from corral.cli.scaffold import write_starter
from corral.client import Bundle, Session
from corral.errors import (
    BadURL,
    CorralError,
    ServerUnreachable,
    TokenMissing,
    TokenRefused,
    UnknownSplit,
)
from corral.protocol.frames import ResetRequest
from corral.protocol.record_store import EpisodeStore
from tests.conftest import FIXTURES, serving

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
TOKEN = "s3cret"


@pytest.fixture(scope="module")
def guarded():
    yield from serving(FIXTURES / "toybox", token=TOKEN)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://env-host:8000/ws", "names the session route; pass the server's base URL, e.g. http://env-host:8000"),
        ("env-host:8000", "has no http:// or https:// scheme; pass e.g. http://env-host:8000"),
        ("ws://env-host:8000", "is a WebSocket URL; pass the server's HTTP URL, e.g. http://env-host:8000"),
    ],
)
def test_a_url_given_the_wrong_way_is_explained(url, says):
    with pytest.raises(BadURL) as refused:
        Bundle(url)
    assert says in str(refused.value)


def test_a_server_that_is_not_there_says_how_to_start_one():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(ServerUnreachable, match="start one with `corral serve BUNDLE --port PORT`"):
        Bundle(f"http://127.0.0.1:{port}")


def test_a_missing_and_a_wrong_token_get_different_messages(guarded, monkeypatch):
    monkeypatch.delenv("CORRAL_TOKEN", raising=False)
    with pytest.raises(
        TokenMissing, match="wants a bearer token and none was sent: pass token=... or set CORRAL_TOKEN"
    ):
        Bundle(guarded.url)
    with pytest.raises(TokenRefused, match="refused the bearer token it was sent"):
        Bundle(guarded.url, token="wrong")
    for token, refusal in ((None, TokenMissing), ("wrong", TokenRefused)):  # the socket's handshake too
        with pytest.raises(refusal):
            Session(guarded.url, token=token).request(ResetRequest(), 30)


def test_every_route_wants_the_token_the_docs_too(guarded):
    for path in ("/health", "/metadata", "/schema", "/docs", "/redoc", "/openapi.json", "/toolsets"):
        assert httpx.get(guarded.url + path, trust_env=False).status_code == 401, path
        wrong = httpx.get(guarded.url + path, headers={"Authorization": "Bearer nope"}, trust_env=False)
        assert wrong.status_code == 403, path
    assert httpx.post(guarded.url + "/mcp", json={}, trust_env=False).status_code == 401
    assert (
        httpx.get(guarded.url + "/docs", headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False).status_code
        == 200
    )


def test_corral_token_in_the_environment_is_used(guarded, monkeypatch):
    monkeypatch.setenv("CORRAL_TOKEN", TOKEN)
    with Bundle(guarded.url, split="toy") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        environment.say("apple")  # by position
        assert environment.get_reward() == 1.0


def test_a_split_without_tasks_says_which_splits_have_some(serve, tmp_path):
    root = write_starter("evals-only", tmp_path)
    (root / "evals" / "eval.toml").write_text('tasks = ["from-2-to-10", "from-3-to-12", "from-5-to-9"]\n')
    server = serve(root)
    with pytest.raises(UnknownSplit) as refused:
        Bundle(server.url)  # split="train" by default: here every task is an eval task
    assert (
        "split 'train' of bundle evals-only has no tasks (its splits: all (3 tasks), train (0 tasks), eval (3 tasks))"
        in str(refused.value)
    )
    with pytest.raises(UnknownSplit, match="has no split 'test'; its splits are: all"):
        Bundle(server.url, split="test")
    assert issubclass(UnknownSplit, CorralError)


def test_a_verifier_that_raises_mid_training_is_named_by_file_and_line_in_the_reason(serve, tmp_path, caplog):
    """It raises on what the agent did only (the task played untouched scores), so the episode
    is the agent's 0 (endings by evidence), and its reason names the verifier's file and line."""
    root = write_starter("raises-late", tmp_path)
    verifier = root / "verifiers" / "reached.py"
    verifier.write_text(
        "def verify(task, report):\n    if report['calls'] == 0:\n        return 0.0\n"
        "    return float(report['missing_key'])\n"
    )  # a fresh report passes corral check
    server = serve(root, record_dir=tmp_path / "records")

    with Bundle(server.url, split="all") as env:
        environment = env.factory()
        environment.reset(**next(row for row in env.dataset if row["task_id"] == "from-2-to-10"))
        environment.add(amount=8)
        with caplog.at_level(logging.INFO, logger="corral.client"):
            assert environment.get_reward() == 0.0
    server.stop()

    reason = (
        "the episode could not be scored: verifier reached raised KeyError: 'missing_key' "
        f"at {verifier}:4 (return float(report['missing_key'])); the same task played untouched in a fresh "
        "sandbox was scored, so the failure came from what the agent did"
    )
    assert f"rollout failed by the agent, scored 0.0: {reason}" in caplog.messages  # what the trainer's log says
    with EpisodeStore(tmp_path / "records") as store:
        (row,) = store.find()
        assert store.episode(row.episode_id).reason == reason
