"""`corral/reset` with `copied` (a fork's copy, fork = "copy"): the env's `resume` runs in place
of `reset`, which is its default; anything but true or false is refused."""

from __future__ import annotations

import json

from corral.env import Env
from corral.env.runtime import Server


class Loads(Env):
    def reset(self, args: dict) -> None:
        self.heard = ["reset", args["n"]]


class Resumes(Loads):
    def resume(self, args: dict) -> None:
        self.heard = ["resume", args["n"]]


def reset(server: Server, **params) -> dict:
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "corral/reset", "params": {"task": {"n": 1}, **params}})
    reply = server.answer(line.encode())
    assert reply is not None
    return reply


def test_a_copy_resumes_the_task_and_an_episode_resets_it():
    for copied, heard in ((True, ["resume", 1]), (False, ["reset", 1])):
        server = Server(Resumes())
        assert reset(server, copied=copied)["result"] == {}
        assert server.env.heard == heard


def test_an_env_without_resume_resets_a_copy():
    server = Server(Loads())
    reset(server, copied=True)
    assert server.env.heard == ["reset", 1]


def test_copied_must_be_true_or_false():
    assert '"copied" is true or false' in reset(Server(Resumes()), copied="yes")["error"]["message"]
