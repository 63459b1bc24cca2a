"""Attacks a fresh adversary tried on the local sandbox, beyond tests/attacks.py: each must end
the episode scored at the failure score (never null, never above it).

- Frames the server cannot send back: an argument holding a lone surrogate (JSON's `\\udc80`,
  which any client that writes JSON with `ensure_ascii` sends as it is) comes back in the
  tool's answer, which UTF-8 cannot carry.
- Odd files a repository with the bug in it may hold, which the verifier's copy must survive
  (a tree deeper than Python's recursion limit among them).
- The Python verifiers' worker pool, shared by every episode: episodes of the same policy that
  keep it busy with verifications that hang must not make an untouched replay time out too,
  nor take a good episode's 1.
- An env answer past the protocol's line limit (64 MB).
- Numbers in a tool's arguments that no integer argument takes (NaN, Infinity, 400 digits).
- The env signalled (STOP, KILL, INT, TERM) by a process the agent detached, from the moment
  its call is answered through the end of the turn and the verification: the env is its
  namespace's first process, so STOP and KILL from inside do nothing, and INT ends it.
- The protocol's pipes opened under /proc, through the env or a process holding its stdio:
  none can be (test_local_protocol_forgery forges a report through them where one could).
- A link whose name is not UTF-8, leading into /proc: the verifier is stopped and its output
  names the link, decoded as the file system gives it (a lone surrogate for each odd byte),
  which no frame could carry: the end_turn reply failed, and the trainer got an error, not the
  0. Every observation is now written with U+FFFD in place of a lone surrogate
  (reply_text.observation_reply_text). Fixed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator

import pytest

from corral.protocol.frames import CallToolObservation
from tests.attacks import HOUND, PROTOCOL_OPENER, SIGNALS, TASK, bash, play
from tests.conftest import BUNDLES, serving
from tests.probe_bundle import write_probe_bundle
from tests.wire import call, called, observed, opened, rpc, send, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


@pytest.fixture(scope="module")
def shellfix():
    yield from serving(BUNDLES / "shellfix", sandbox="local", max_concurrent_envs=4)


@pytest.fixture(scope="module")
def shellfix_recorded(tmp_path_factory):
    yield from serving(BUNDLES / "shellfix", sandbox="local", record_dir=tmp_path_factory.mktemp("records"))


def raw_call(name: str, **arguments: object) -> str:
    """A step frame as Python's json writes it: a lone surrogate becomes the escape `\\udc80`."""
    frame = json.loads(call("").model_dump_json())
    frame["data"].update(tool_name=name, arguments=arguments)
    return json.dumps(frame)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("write_file", {"path": "\udc80.py", "content": "x = 1\n"}),  # answered "wrote \udc80.py ..."
        ("replace_in_file", {"path": "../\udc80", "old": "a", "new": "b"}),  # refused "../\udc80 is outside ..."
        ("read_file", {"path": "../\udc80"}),
        ("bash", {"command": "touch '\udc80' && ls"}),
        ("\udc80", {}),  # refused: no such tool, named as the call named it
    ],
)
def test_a_lone_surrogate_in_an_argument_neither_breaks_the_session_nor_dodges_the_0(shellfix, tool, arguments):
    with ws(shellfix) as socket:
        opened(socket, task_id=TASK)
        answered = send(socket, raw_call(tool, **arguments))  # the socket closing here raises
        observed(answered, CallToolObservation)
        ended = called(socket, "end_turn", response="done")

    assert (ended.status, ended.reward) == ("scored", 0.0)


def test_a_lone_surrogate_in_an_mcp_tools_call_neither_breaks_the_session_nor_dodges_the_0(shellfix):
    frame = {
        "type": "mcp",
        "data": {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "id": 1,
            "params": {"name": "write_file", "arguments": {"path": "\udc80.py", "content": ""}},
        },
    }
    with ws(shellfix) as socket:
        opened(socket, task_id=TASK)
        rpc(send(socket, json.dumps(frame)))  # the socket closing here raises
        ended = called(socket, "end_turn", response="done")

    assert (ended.status, ended.reward) == ("scored", 0.0)


@pytest.mark.parametrize("recorded", [False, True])
def test_a_lone_surrogate_in_the_reply_still_gets_the_0(shellfix, shellfix_recorded, recorded):
    with ws(shellfix_recorded if recorded else shellfix) as socket:
        opened(socket, task_id=TASK)
        ended = observed(send(socket, raw_call("end_turn", response="done \udc80")), CallToolObservation)

    assert (ended.status, ended.reward) == ("scored", 0.0)


ODD_FILES = {
    "a folder nobody may read": "mkdir -p locked/inner && echo x > locked/inner/f && chmod 000 locked",
    "a file nobody may read": "echo x > secret && chmod 000 secret",
    "a unix socket": "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"",
    "a name that is not UTF-8": "touch $'\\x80\\xff' && mkdir $'\\xc3('",
    "a name with a newline": "touch $'a\\nb' && touch $'-rf'",
    "a path 200 folders deep": "p=.; for i in $(seq 200); do p=$p/dddddddddddddddddddd; done; mkdir -p $p && touch $p/f",
    # Deeper than Python 3.11's os.walk and shutil.rmtree can recurse: they raised RecursionError.
    "a path 1,500 folders deep": "p=.; for i in $(seq 1500); do p=$p/d; done; mkdir -p $p && touch $p/f",
    "a hard link to a file of the repository": "ln batching.py linked.py",
    "a symlink loop": "ln -s loop loop && ln -s a b && ln -s b a",
    "20,000 empty files": "mkdir many && cd many && seq 20000 | xargs touch",
    # Held in the fifth pass, as the ones below:
    "xattrs and setuid bits": "python3 -c \"import os; os.setxattr('batching.py', 'user.x', b'1')\" && chmod ug+s batching.py",
    "startup files in HOME": (
        "d=$HOME/.local/lib/python3.11/site-packages && mkdir -p $d && echo 'import posix; posix._exit(0)' > $d/x.pth"
        " && printf '[core]\\n\\tfsmonitor = true\\n' > $HOME/.gitconfig && echo machine x > $HOME/.netrc"
    ),
    "a chain of 20,000 links": (
        "mkdir L && cd L && python3 -c \"import os\nfor i in range(20000): os.symlink(f'l{i + 1}', f'l{i}')\""
    ),
    "a hard link to a system file": "ln /etc/passwd pw || true",
}


@pytest.mark.parametrize("odd", ODD_FILES)
def test_odd_files_beside_the_bug_score_0_not_unscored(shellfix, odd):
    ended = play(shellfix, [bash(ODD_FILES[odd])])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason


@pytest.mark.parametrize(
    "odd", ["a folder nobody may read", "a unix socket", "a name that is not UTF-8", "a path 1,500 folders deep"]
)
def test_odd_files_beside_the_fix_still_score_1(shellfix, odd):
    assert play(shellfix, [bash(ODD_FILES[odd])], fixed=True).reward == 1.0


@pytest.fixture
def probe_one_worker(tmp_path):
    yield from serving(write_probe_bundle(tmp_path), max_concurrent_envs=40, verifier_workers=1, reset_timeout_s=8)


def hanging_episode(server) -> None:
    """An episode of the same policy whose verification hangs (the probe's judge sleeps on "hang")."""
    with ws(server) as socket:
        opened(socket, task_id="plain")
        called(socket, "say", word="hang")
        send(socket, call("end_turn", response="done"), timeout_s=120)


@contextlib.contextmanager
def hanging_verifications(server) -> Iterator[None]:
    """A stream of episodes whose verifications hang, one a second: the one worker is always
    held, with more waiting behind it, each until its episode's deadline (8 s)."""
    stop = threading.Event()

    def feed() -> None:
        while not stop.is_set():
            threading.Thread(target=hanging_episode, args=(server,), daemon=True).start()
            time.sleep(1)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        time.sleep(3)
        yield
    finally:
        stop.set()
        feeder.join()


def played(server, word: str) -> CallToolObservation:
    with ws(server) as socket:
        opened(socket, task_id="plain")
        called(socket, "say", word=word)
        return observed(send(socket, call("end_turn", response="done"), timeout_s=120), CallToolObservation)


def test_episodes_that_keep_the_verifier_pool_busy_do_not_make_the_untouched_replay_fail(probe_one_worker):
    with hanging_verifications(probe_one_worker):
        ended = played(probe_one_worker, "hang")

    assert (ended.status, ended.reward) == ("failed", 0.0), ended.reason


def test_episodes_that_keep_the_verifier_pool_busy_do_not_take_a_good_episode_s_1(probe_one_worker):
    with hanging_verifications(probe_one_worker):
        ended = played(probe_one_worker, "apple")

    assert (ended.status, ended.reward) == ("scored", 1.0), ended.reason


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    yield from serving(write_probe_bundle(tmp_path_factory.mktemp("probe")), max_concurrent_envs=4, reset_timeout_s=8)


def test_an_answer_past_the_env_s_line_limit_ends_with_the_failure_score(probe):
    # 70 MB of text in one JSON line, past the 64 MB a line of the env's protocol may hold.
    with ws(probe) as socket:
        opened(socket, task_id="plain")
        said = observed(send(socket, call("echo", size=70_000_000), timeout_s=120), CallToolObservation)
        if not said.done:
            said = called(socket, "end_turn", response="done")

    assert (said.status, said.reward) == ("failed", 0.0), said.reason


@pytest.fixture(scope="module")
def gridsim():
    yield from serving(BUNDLES / "gridsim", sandbox="local", max_concurrent_envs=2)


# Numbers JSON can spell that no integer argument takes: Python's json writes NaN and Infinity,
# and reads an integer of any length.
ODD_NUMBERS = {"NaN": float("nan"), "Infinity": float("inf"), "an integer of 400 digits": 10**400}


@pytest.mark.parametrize("number", ODD_NUMBERS)
def test_numbers_no_integer_argument_takes_are_refused_or_infeasible_and_score_0(gridsim, number):
    with ws(gridsim) as socket:
        opened(socket, task_id="gridsim-2014-01-02")
        said = observed(
            send(socket, raw_call("submit_schedule", actions=[ODD_NUMBERS[number]] * 24)), CallToolObservation
        )
        ended = called(socket, "end_turn", response="done")

    refused = said.error is not None and said.error.error_type == "invalid_args"
    assert refused or json.loads(said.result)["feasible"] is False, said
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason


@pytest.mark.parametrize("signal", SIGNALS)
def test_the_env_signalled_after_the_agent_s_call_ends_at_the_failure_score(shellfix, signal):
    ended = play(shellfix, [bash(HOUND.format(signal=signal), "started\n[exit status 0]")])

    assert ended.reward == 0.0 and ended.status in ("scored", "failed"), (ended.status, ended.reason)


def test_no_process_in_the_episode_lets_the_agent_open_the_protocol_s_stream(shellfix):
    ended = play(shellfix, [bash(PROTOCOL_OPENER, "opened []\n[exit status 0]")])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason


def test_a_verifier_output_naming_a_file_that_is_not_utf8_still_brings_the_0(shellfix):
    ended = play(shellfix, [bash("ln -s /proc/self/fd/0 $'\\x80\\xff' && echo made", "made\n[exit status 0]")])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason
    assert "\ufffd\ufffd -> /proc/self/fd/0" in ended.metadata["verifier_output"]["tests"]
