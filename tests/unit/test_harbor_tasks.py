"""A folder of Harbor tasks read as a bundle, without an engine: which tasks are served, which
are left out and why, what is a problem, and how a reward file becomes scores.

The fixture folder (tests/fixtures/harbor) holds ten tasks of different kinds; the docker tests
(tests/docker/test_harbor*.py) play them.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.errors import ImageError
from corral.protocol.catalog import ToolSpec
from corral.sandboxes import CommandResult, Prepared, SandboxProvider, SandboxSpec
from corral.server.bundles.format import RewardFileVerifier
from corral.server.bundles.verifiers import reward_file_score
from corral.server.formats import load_bundle
from corral.server.harbor.hosted import READY_REPLY
from corral.server.harbor.legacy import REWARD_LOGGING_SUFFIX
from corral.server.harbor.tools import OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES, TOOLS, _MarkedOutput
from corral.server.serving.served import _toolsets
from tests.conftest import FIXTURES

HARBOR = FIXTURES / "harbor"
SERVED = [
    "c-build",
    "csv-stats",
    "git-repair",
    "legacy-wordcount",
    "multi-step",
    "shell-only",
    "two-scores",
    "yaml-config",
]


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the fixture folder to break."""
    return Path(shutil.copytree(HARBOR, tmp_path / "tasks"))


def test_a_folder_of_harbor_tasks_is_a_bundle_of_its_servable_tasks():
    bundle = load_bundle(HARBOR)

    assert bundle.problems == []
    assert sorted(bundle.tasks) == SERVED
    assert {name: [task.id for task in tasks] for name, tasks in bundle.splits.items()} == {
        "all": SERVED,
        "train": [task for task in SERVED if task not in ("csv-stats", "two-scores")],
        "eval": ["csv-stats", "two-scores"],
    }
    task = bundle.tasks["csv-stats"]
    assert task.prompt.startswith("The file `/app/sales.csv` lists sales")  # the canary line is gone
    assert (task.time_budget_s, task.verifiers) == (600.0, {"reward": "csv-stats"})
    spec = bundle.envs["csv-stats"].spec
    assert (spec.writable_root, spec.user, spec.network, spec.resources.memory_mb) == (True, "", "none", 1024)


def test_what_an_agent_may_write_to_its_root_is_the_task_s_storage_mb_or_the_bundle_s_disk_mb(copy):
    config = copy / "csv-stats" / "task.toml"
    config.write_text(config.read_text().replace("[environment]", "[environment]\nstorage_mb = 300"))
    (copy / "bundle.toml").write_text((copy / "bundle.toml").read_text() + "\n[resources]\ndisk_mb = 700\n")

    bundle = load_bundle(copy)

    assert (
        bundle.envs["csv-stats"].spec.resources.disk_mb,
        bundle.envs["two-scores"].spec.resources.disk_mb,
        load_bundle(HARBOR).envs["csv-stats"].spec.resources.disk_mb,
    ) == (300, 700, 10240)


def test_a_task_that_asks_for_a_network_is_left_out_with_the_reason_unless_the_operator_allows_it():
    offline = load_bundle(HARBOR)
    online = load_bundle(HARBOR, network="egress")

    (left_out,) = [problem for problem in offline.extension.left_out if problem.file.endswith("needs-network")]
    assert "network_mode = 'public'" in left_out.message and "--network egress" in left_out.message
    assert "needs-network" in online.tasks
    assert online.envs["needs-network"].spec.network == "egress"
    assert online.envs["csv-stats"].spec.network == "egress"  # Harbor's default is public
    assert offline.envs["csv-stats"].spec.network == "none"


def test_a_task_of_several_containers_is_left_out_saying_so():
    bundle = load_bundle(HARBOR)

    (left_out,) = [problem for problem in bundle.extension.left_out if problem.file.endswith("two-containers")]
    assert "several containers (environment/docker-compose.yaml)" in left_out.message


def test_an_older_task_yaml_task_is_migrated_as_harbor_migrates_it():
    task = load_bundle(HARBOR).extension.tasks["legacy-wordcount"]

    assert task.migrated_from == HARBOR / "legacy-wordcount"
    assert task.instruction == "Count the words in /app/input.txt and write the number, alone, to /app/count.txt.\n"
    assert (task.config.agent.timeout_sec, task.config.verifier.timeout_sec) == (300.0, 60.0)
    test_sh = (task.tests_dir / "test.sh").read_text()
    assert "/tests/test_outputs.py" in test_sh and "$TEST_DIR" not in test_sh
    assert test_sh.endswith(REWARD_LOGGING_SUFFIX)
    assert sorted(path.name for path in task.environment_dir.iterdir()) == ["Dockerfile", "input.txt"]
    assert (task.solution_dir / "solve.sh").is_file()


def test_broken_tasks_are_problems_naming_the_task_and_the_fix(copy: Path):
    (copy / "csv-stats" / "tests" / "test.sh").unlink()
    (copy / "c-build" / "environment" / "Dockerfile").unlink()
    (copy / "git-repair" / "task.toml").write_text("[agent\n")
    (copy / "multi-step" / "instruction.md").unlink()

    problems = {problem.file: problem.message for problem in load_bundle(copy).problems}

    assert "tests/test.sh is missing" in problems["tasks/csv-stats"]
    assert "environment/Dockerfile is missing" in problems["tasks/c-build"]
    assert "task.toml is not valid TOML" in problems["tasks/git-repair"]
    assert "instruction.md is missing" in problems["tasks/multi-step"]


def test_what_corral_cannot_play_as_harbor_would_is_left_out(copy: Path):
    toml = copy / "csv-stats" / "task.toml"
    toml.write_text(
        toml.read_text()
        .replace("[environment]\n", "[environment]\ngpus = 1\n")
        .replace('TOTALS = "/app/totals.json"', 'OPENAI_API_KEY = "${OPENAI_API_KEY}"')
    )
    (copy / "bundle.toml").write_text('exclude = ["yaml-config"]\n')

    left_out = {problem.file: problem.message for problem in load_bundle(copy).extension.left_out}

    assert "GPU" in left_out["tasks/csv-stats"] and "OPENAI_API_KEY" in left_out["tasks/csv-stats"]
    assert left_out["tasks/yaml-config"] == "excluded by bundle.toml's exclude"


def test_bundle_toml_mistakes_are_problems(copy: Path):
    (copy / "bundle.toml").write_text('colour = "blue"\nnetwork = "some"\n')

    messages = [problem.message for problem in load_bundle(copy).problems]

    assert any("'colour': remove it" in message for message in messages)
    assert any("'network'" in message for message in messages)


def test_a_base_image_folder_without_a_dockerfile_is_a_problem(copy: Path):
    text = (copy / "bundle.toml").read_text().replace("_images/shared", "_images/nowhere")
    (copy / "bundle.toml").write_text(text)

    messages = [problem.message for problem in load_bundle(copy).problems]

    assert any("builds '_images/nowhere', which has no Dockerfile" in message for message in messages)


def test_tasks_of_many_envs_offering_the_same_tools_share_one_toolset():
    bundle = load_bundle(HARBOR)
    tools = [ToolSpec.model_validate(tool) for tool in TOOLS.values()]

    toolsets, toolset_of = _toolsets(bundle, dict.fromkeys(bundle.envs, tools))

    assert list(toolsets) == ["harbor-fixtures"]
    assert set(toolset_of.values()) == {"harbor-fixtures"}
    assert [tool.name for tool in toolsets["harbor-fixtures"].tools] == [*TOOLS, "end_turn"]


TESTS = RewardFileVerifier(command=["true"], files=[], timeout_s=60)


def scored(exit_code: int | None = 0, **results: bytes) -> tuple[dict[str, float], str]:
    paths = {"json": "/logs/verifier/reward.json", "txt": "/logs/verifier/reward.txt"}
    score = reward_file_score("t", TESTS, CommandResult(exit_code, "out\n", {paths[k]: v for k, v in results.items()}))
    return score.scores_for("reward"), score.output_tail


@pytest.mark.parametrize(
    ("results", "scores"),
    [
        ({"txt": b"1\n"}, {"reward": 1.0}),
        ({"txt": b"0.25"}, {"reward": 0.25}),
        ({"json": b'{"reward": 1, "lines": 0.5}', "txt": b"0"}, {"reward": 1.0, "lines": 0.5}),  # JSON wins
        ({"json": b"0.75"}, {"reward": 0.75}),
    ],
)
def test_a_reward_file_gives_the_scores_harbor_reads_from_it(results, scores):
    assert scored(**results)[0] == scores


@pytest.mark.parametrize(
    ("exit_code", "results", "why"),
    [
        (0, {}, "it wrote no reward.json nor reward.txt"),
        (0, {"txt": b"pass"}, "its reward.txt is not a number"),
        (0, {"txt": b"nan"}, "its reward.txt is not a finite number"),
        (0, {"json": b'{"reward": "1"}'}, "values that are not finite numbers (reward)"),
        (0, {"json": b"{}"}, "an empty object"),
        (0, {"json": b"reward: 1"}, "its reward.json is not JSON"),
        (None, {"txt": b"1"}, "it timed out after 60s"),
    ],
)
def test_a_missing_or_garbled_reward_file_scores_0_saying_why(exit_code, results, why):
    scores, output = scored(exit_code, **results)

    assert scores == {"reward": 0.0}
    assert why in output and output.startswith("out\n")


def marked(chunks: list[bytes]) -> _MarkedOutput:
    output = _MarkedOutput("n0nce")

    class Stream:
        async def read(self) -> bytes:
            return chunks.pop(0) if chunks else b""

    asyncio.run(output.read_until_exit(Stream()))  # type: ignore[arg-type]
    return output


def test_the_bash_wrappers_lines_are_taken_out_of_the_output_wherever_the_chunks_split_them():
    whole = b"\nn0nce pid 42\nhello\nworld" + b"\nn0nce exit 3\n" + b"late background output"
    for cut in range(1, len(whole)):
        output = marked([whole[:cut], whole[cut:]])
        assert (output.text(), output.pid, output.exit_status) == ("hello\nworld", 42, 3), cut


@pytest.mark.parametrize("printed", [b"hi\nn0nce pid 7\n", b"\nn0nce pid 42\nhi\nn0nce pid 7\n"])
def test_a_pid_line_the_command_prints_is_its_output_and_names_nothing_to_kill(printed):
    """The wrapper's pid line begins the output, printed before the command runs; the command
    can read the nonce (in /proc) and print one, which must not steer the timeout's kill."""
    output = marked([printed + b"\nn0nce exit 0\n"])
    assert output.pid == (42 if printed.startswith(b"\nn0nce") else None)
    assert output.text() == "hi\nn0nce pid 7\n"


def test_long_output_keeps_its_head_and_tail_with_a_visible_note():
    body = bytes(range(48, 58)) * 2000  # 20,000 bytes of digits
    output = marked([body[:7000], body[7000:], b"\nn0nce exit 0\n"])

    text = output.text()
    assert text.startswith(body[:OUTPUT_HEAD_BYTES].decode()) and text.endswith(body[-OUTPUT_TAIL_BYTES:].decode())
    assert f"[output cut: {20000 - OUTPUT_HEAD_BYTES - OUTPUT_TAIL_BYTES:,} bytes of 20,000 left out" in text


def test_the_tools_are_described_for_the_model():
    assert {name: sorted(tool["inputSchema"]["properties"]) for name, tool in TOOLS.items()} == {
        "bash": ["command", "timeout_s"],
        "read_file": ["path"],
        "write_file": ["content", "path"],
        "replace_in_file": ["new", "old", "path"],
    }
    assert json.dumps(TOOLS)  # plain JSON, as tools/list sends it


class Engine(SandboxProvider):
    """A provider that has the images in `present` and builds any folder: what ImagePlan asks of one."""

    kind, isolated = "fake", True

    def __init__(self, present: set[str]):
        self.present = present
        self.built: list[str] = []

    async def prepare(self, spec: SandboxSpec, progress=print) -> Prepared:
        if spec.image is not None:
            if spec.image not in self.present:
                raise ImageError(f"no image {spec.image}")
            return Prepared(spec.env_name, spec.image, built=False, seconds=0.0)
        self.built.append((spec.context_dir / spec.dockerfile).read_text())
        return Prepared(spec.env_name, f"built/{spec.env_name}", built=True, seconds=0.0)

    async def start(self, spec, labels=None):
        raise NotImplementedError

    def status(self):
        raise NotImplementedError


def prepare(bundle, task_id: str, engine: Engine) -> Prepared:
    spec = bundle.envs[task_id].spec
    return asyncio.run(bundle.extension.images.prepare(engine, spec, print))[1]


def test_a_mapped_from_image_is_built_from_its_base_folder_once_for_every_task_using_it():
    bundle, engine = load_bundle(HARBOR), Engine(present={"debian:bookworm-slim"})

    prepared = [prepare(bundle, task_id, engine) for task_id in ("csv-stats", "two-scores", "shell-only")]

    froms = [next(line for line in built.splitlines() if line.startswith("FROM")) for built in engine.built]
    assert froms == [
        "FROM debian:bookworm-slim",  # the base, built once: then the tasks on it
        "FROM built/base-shared",
        "FROM built/base-shared",
        "FROM debian:bookworm-slim",
    ]
    assert [item.image for item in prepared] == ["built/csv-stats", "built/two-scores", "built/shell-only"]
    assert dict(bundle.extension.images.used) == {"python:3.12-slim": 2, "ubuntu:24.04": 1}


def test_a_docker_image_is_used_when_the_engine_has_it_else_the_dockerfile_is_built(copy: Path):
    toml = copy / "yaml-config" / "task.toml"
    toml.write_text(toml.read_text() + '\n[environment]\ndocker_image = "team/yaml-config:1"\n')
    bundle = load_bundle(copy)

    assert prepare(bundle, "yaml-config", Engine(present={"team/yaml-config:1"})).image == "team/yaml-config:1"
    assert prepare(load_bundle(copy), "yaml-config", Engine(present=set())).image == "built/yaml-config"
    (copy / "yaml-config" / "environment" / "Dockerfile").unlink()
    with pytest.raises(
        ImageError, match="docker_image team/yaml-config:1 is not on this engine and it has no environment/Dockerfile"
    ):
        prepare(load_bundle(copy), "yaml-config", Engine(present=set()))


def test_check_on_the_local_sandbox_says_harbor_tasks_need_docker():
    result = CliRunner().invoke(app, ["check", str(HARBOR), "--sandbox", "local"])

    assert result.exit_code == 1
    assert (
        "harbor/csv-stats: task csv-stats runs in its own image, as a whole machine, which the local sandbox "
        "does not run; serve Harbor tasks with --sandbox docker"
    ) in result.output


@pytest.mark.bwrap
def test_check_refuses_an_unknown_network_policy_and_the_oracle_on_a_corral_bundle():
    network = CliRunner().invoke(app, ["check", str(HARBOR), "--network", "public"])
    oracle = CliRunner().invoke(app, ["check", str(FIXTURES / "toybox"), "--sandbox", "local", "--oracle"])

    assert (network.exit_code, oracle.exit_code) == (2, 2)
    assert "unknown --network 'public'; choose one of: none, egress" in network.output
    assert "--oracle and --null play Harbor tasks" in oracle.output


def test_the_idle_process_of_a_task_container_answers_the_warm_pools_readiness_ping():
    from corral.sandboxes.shared.warm_pool import (
        PING_ID,  # the server may not import it; the test keeps them one
    )

    assert json.loads(READY_REPLY) == {"jsonrpc": "2.0", "id": PING_ID, "result": {}}


def test_check_names_the_tasks_whose_tests_run_as_their_agent_s_user(copy):
    """Tests that run as the agent's own user (shell-only, as it comes) run what the agent
    configured for the programs they call (git runs the core.fsmonitor script a repository's
    .git/config names, which can write reward.json: docs/harbor.md): `corral check` names
    them, and says the fix."""
    root = copy
    for task in ("csv-stats", "yaml-config"):  # USER worker in the image; tests as the image's user
        dockerfile = root / task / "environment" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text() + "USER worker:worker\n")
    toml = root / "yaml-config" / "task.toml"  # ...unless the task runs them as root
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nuser = "root"\n'))
    toml = root / "two-scores" / "task.toml"  # both phases as the same user, named in task.toml
    toml.write_text(
        toml.read_text()
        .replace("[verifier]\n", '[verifier]\nuser = "1000"\n')
        .replace("[agent]\n", '[agent]\nuser = "1000"\n')
    )
    notes = load_bundle(root).extension.notes
    (shared,) = [note for note in notes if "run their tests as their agent's user" in note]
    assert shared.startswith("3 task(s) run their tests as their agent's user (csv-stats, shell-only, two-scores)")
    assert "[verifier] user" in shared


def test_check_names_the_tasks_whose_agent_runs_as_root_and_says_the_fix(copy):
    """A root agent can replace python3 or bash under its tests: `corral check` says which tasks
    let it, as far as task.toml and the Dockerfile tell, and how to stop it."""
    root = copy
    (root / "csv-stats" / "task.toml").write_text(
        (root / "csv-stats" / "task.toml").read_text().replace("[agent]\n", '[agent]\nuser = "nobody"\n')
    )
    dockerfile = root / "yaml-config" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "USER 1000:1000\n")
    notes = load_bundle(root).extension.notes
    (rooted,) = [note for note in notes if "run their agent as root" in note]
    assert rooted.startswith("5 task(s) run their agent as root (c-build, git-repair, legacy-wordcount)")
    assert "[agent] user, or USER in the Dockerfile" in rooted


def test_check_names_the_tasks_whose_image_sets_a_start_up_variable_and_says_the_fix(copy):
    """An image's ENV is part of its tests' trust base: `corral check` names a task whose image
    sets a variable that runs code as a program starts (its tests get it empty), unless the task
    sets it for its verifier."""
    root = copy
    for task in ("csv-stats", "yaml-config"):
        dockerfile = root / task / "environment" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text() + "ENV LANG=C.UTF-8 BASH_ENV=/home/w/.env\nENV LD_PRELOAD /x.so\n")
    toml = root / "yaml-config" / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nenv = { BASH_ENV = "", LD_PRELOAD = "" }\n'))
    notes = load_bundle(root).extension.notes
    (startup,) = [note for note in notes if "runs code as a program starts" in note]
    assert startup.startswith("1 task(s) set in their image's ENV a variable that runs code as a program starts")
    assert "(csv-stats (BASH_ENV, LD_PRELOAD))" in startup and "[verifier] env" in startup
