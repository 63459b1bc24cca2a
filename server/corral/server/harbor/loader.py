"""A folder of Harbor tasks (or one task folder) read as a corral bundle.

Each task folder (task.toml, or an older task.yaml: legacy.py) becomes:
- an env of its own, whose sandbox is the task's image run whole (`SandboxSpec.writable_root`:
  its user, working folder and variables; the agent may write anywhere), with the limits of
  its task.toml and no network unless the operator's policy allows what the task asks;
- a task, its instruction the prompt, the agent's tools the terminal tools (hosted.py), its
  time budget `[agent] timeout_sec`;
- a `RewardFileVerifier`: after the agent's turn, tests/ goes to /tests in a copy of what the
  agent left, `test.sh` runs within `[verifier] timeout_sec`, and the reward file it writes
  in /logs/verifier is the score (docker.whole_image.snapshot, verifiers.reward_file_score).

What corral cannot serve (several containers, a GPU, several steps, a network the operator
has not allowed...) is left out of the bundle with the reason (`HarborPart.left_out`), which
`corral check` lists; what is broken (no tests/test.sh, no Dockerfile) is a problem.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from pydantic import ValidationError

from corral.sandboxes import NETWORK_POLICIES, Resources, SandboxSpec
from corral.server.bundles.format import (
    CommandVerifier,
    EnvConfig,
    Manifest,
    RewardFileVerifier,
    ServeDefaults,
    Task,
)
from corral.server.bundles.model import RESERVED_SPLIT, TRAIN_SPLIT, BundleEnv, LoadedBundle
from corral.server.bundles.problems import Problem
from corral.server.harbor.bundle_file import HarborManifest
from corral.server.harbor.hosted import KEEPER
from corral.server.harbor.images import ImagePlan, read_base_images
from corral.server.harbor.legacy import is_legacy, read_legacy
from corral.server.harbor.part import HarborPart
from corral.server.harbor.task_files import HarborTask, NetworkMode, TaskFileError, read_task
from corral.server.harbor.tools import MAX_TIMEOUT_S

SCORE = "reward"  # the score id of every Harbor task's tests (reward.txt's score; reward.json names its own)
RUN_TESTS = "if command -v bash >/dev/null 2>&1; then exec bash /tests/test.sh; else exec sh /tests/test.sh; fi"
VERIFY_SETUP_S = 180.0  # committing, starting and reading back, beside test.sh's own timeout


class HarborFormat:
    """Harbor's task folders (task.toml, or an older task.yaml) as a bundle format."""

    name = "harbor"
    looks_for = "task.toml or task.yaml, in the folder or in its subfolders"

    def recognises(self, folder: Path) -> bool:
        return is_harbor_folder(folder)

    def load(self, folder: Path, *, network: str | None) -> LoadedBundle:
        return load_harbor(folder, network=network)


def is_harbor_folder(root: Path) -> bool:
    """Whether `root` is a Harbor task, or a folder whose subfolders hold Harbor tasks."""
    if _is_task(root):
        return True
    if not root.is_dir() or (root / "envs").is_dir():  # a corral bundle has envs/
        return False
    return any(child.is_dir() and _is_task(child) for child in root.iterdir())


def load_harbor(root: Path, *, network: str | None = None) -> LoadedBundle:
    """Read the Harbor tasks at `root`; `bundle.problems` lists what is wrong, and
    `bundle.extension.left_out` (a HarborPart's) what corral does not serve, each with the reason."""
    problems: list[Problem] = []
    manifest = _read_manifest(root, problems)
    policy = network or manifest.network
    if policy not in NETWORK_POLICIES:
        problems.append(Problem(root.name, f"network policy {policy!r}: choose one of {', '.join(NETWORK_POLICIES)}"))
        policy = "none"
    base_images, wrong = read_base_images(manifest.base_images, root)
    problems.extend(Problem(f"{root.name}/bundle.toml", message) for message in wrong)
    read, left_out, notes = _read_tasks(root, manifest, policy, problems)
    envs = {
        task.id: BundleEnv(
            task.id, task.environment_dir, EnvConfig(command=list(KEEPER)), spec=_spec(task, manifest, policy)
        )
        for task in read.values()
    }
    tasks = {task.id: _task(task, manifest) for task in read.values()}
    verifiers: dict[str, CommandVerifier] = {task.id: _tests(task) for task in read.values()}
    splits = _splits(root, manifest, tasks, read, left_out, problems)
    longest_test = max((task.config.verifier.timeout_sec for task in read.values()), default=0.0)
    serve = ServeDefaults(
        tool_timeout_s=manifest.serve.tool_timeout_s or MAX_TIMEOUT_S + 30,  # above bash's longest timeout
        reset_timeout_s=manifest.serve.reset_timeout_s or max(600.0, longest_test + VERIFY_SETUP_S),
        reward=manifest.serve.reward or SCORE,
    )
    bundle_manifest = Manifest(
        name=manifest.name or _safe_name(root.name),
        description=manifest.description,
        version=manifest.version,
        serve=serve,
    )
    readme = (root / "README.md").read_text() if (root / "README.md").is_file() else ""
    images = ImagePlan(
        base_images, {task.id: image for task in read.values() if (image := task.config.environment.docker_image)}
    )
    part = HarborPart(tasks=read, images=images, network=policy, left_out=left_out, notes=notes)
    return LoadedBundle(root, bundle_manifest, readme, envs, tasks, splits, {}, problems, verifiers, extension=part)


def _is_task(folder: Path) -> bool:
    return (folder / "task.toml").is_file() or (folder / "task.yaml").is_file()


def _read_manifest(root: Path, problems: list[Problem]) -> HarborManifest:
    path = root / "bundle.toml"
    if not path.is_file():
        return HarborManifest()
    where = f"{root.name}/bundle.toml"
    try:
        return HarborManifest.model_validate(tomllib.loads(path.read_text()))
    except tomllib.TOMLDecodeError as error:
        problems.append(Problem(where, f"not valid TOML: {error}; fix the syntax"))
    except ValidationError as error:
        for item in error.errors():
            key = ".".join(str(part) for part in item["loc"])
            fix = "remove it (see docs/harbor.md for the keys)" if item["type"] == "extra_forbidden" else item["msg"]
            problems.append(Problem(where, f"{key!r}: {fix}"))
    return HarborManifest()


def _read_tasks(
    root: Path, manifest: HarborManifest, policy: str, problems: list[Problem]
) -> tuple[dict[str, HarborTask], list[Problem], list[str]]:
    """The tasks served, the tasks left out (each with why), and notes for `corral check`."""
    folders = _task_folders(root)
    served: dict[str, HarborTask] = {}
    left_out: list[Problem] = []
    for folder in folders:
        where = f"{root.name}/{folder.name}" if folder != root else root.name
        try:
            task = read_legacy(folder) if is_legacy(folder) else read_task(folder)
        except TaskFileError as error:
            problems.append(Problem(where, str(error)))
            continue
        broken = _broken(task)
        if broken:
            problems.append(Problem(where, broken))
            continue
        why = _not_served(task, manifest, policy)
        if why is not None:
            left_out.append(Problem(where, why))
            continue
        served[task.id] = task
    if not folders:
        problems.append(Problem(root.name, "no task folders (a folder with task.toml, or task.yaml); add some"))
    return served, left_out, _check_notes(list(served.values()), policy)


def _task_folders(root: Path) -> list[Path]:
    """`root` when it is a task's folder, else its task folders (not hidden, not `_`-named)."""
    if _is_task(root):
        return [root]
    return sorted(
        child
        for child in root.iterdir()
        if child.is_dir() and not child.name.startswith((".", "_")) and _is_task(child)
    )


def _check_notes(tasks: list[HarborTask], policy: str) -> list[str]:
    """What `corral check` says of the tasks served: what each kind of task risks, and its fix."""
    defaulted = [
        task.id
        for task in tasks
        if task.config.environment.network_mode is None and task.config.environment.allow_internet is None
    ]
    unenforced = [task.id for task in tasks if task.config.environment.healthcheck]
    rooted = [task.id for task in tasks if task.agent_may_be_root]
    shared = [task.id for task in tasks if task.tests_run_as_the_agent]
    startup = [f"{task.id} ({', '.join(started)})" for task in tasks if (started := task.image_startup_variables)]
    notes = []
    if defaulted and policy == "none":
        notes.append(
            f"{len(defaulted)} task(s) leave the network to Harbor's default (public) and are served offline: "
            "a test.sh or solution that downloads (curl, apt-get, pip, uv) fails; check them with --oracle, "
            "or serve with --network egress"
        )
    if rooted:
        notes.append(
            f"{len(rooted)} task(s) run their agent as root ({', '.join(rooted[:3])}), which can replace the "
            "programs their tests run (python3, bash): their verdict does not hold against an agent that "
            "tries; run the agent as another user ([agent] user, or USER in the Dockerfile; docs/harbor.md)"
        )
    if shared:
        notes.append(
            f"{len(shared)} task(s) run their tests as their agent's user ({', '.join(shared[:3])}): "
            "configuration the agent leaves that a program of the tests honours (a repository's .git/config "
            "naming a core.fsmonitor script, which git status runs) runs as the tests, which can write "
            "/logs/verifier/reward.json; run the tests as another user ([verifier] user; docs/harbor.md)"
        )
    if startup:
        notes.append(
            f"{len(startup)} task(s) set in their image's ENV a variable that runs code as a program starts "
            f"({'; '.join(startup[:3])}): their tests get it empty, as its file may be the agent's; a task "
            "whose tests need one sets it in [verifier] env (docs/harbor.md)"
        )
    if unenforced:
        notes.append(
            f"{len(unenforced)} task(s) set a healthcheck, which corral does not run ({', '.join(unenforced[:3])})"
        )
    return notes


def _broken(task: HarborTask) -> str | None:
    """What makes a task unplayable anywhere: its author's to fix."""
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", task.id):
        return f"the folder's name {task.id!r} is not a task id (letters, digits, '.', '-', '_'); rename it"
    if not (task.tests_dir / "test.sh").is_file():
        return "tests/test.sh is missing; it runs the task's tests and writes /logs/verifier/reward.txt"
    has_dockerfile = (task.environment_dir / "Dockerfile").is_file()
    if not has_dockerfile and not task.config.environment.docker_image and task.compose_file is None:
        return "environment/Dockerfile is missing, and task.toml names no [environment] docker_image; add one"
    return None


def _not_served(task: HarborTask, manifest: HarborManifest, policy: str) -> str | None:
    """Why corral leaves a well-formed task out, if it does."""
    if task.id in manifest.exclude:
        return "excluded by bundle.toml's exclude"
    if task.compose_file is not None:
        return (
            f"it runs several containers ({task.compose_file.relative_to(task.folder)}), which corral does not "
            "serve yet; give it one environment/Dockerfile, or exclude it"
        )
    unsupported = task.config.unsupported()
    if unsupported:
        return "; ".join(unsupported)
    asked = task.config.asks_for_network()
    if asked and policy == "none":
        return (
            f"it asks for a network ({asked}), and tasks are served offline unless the operator allows it: "
            'serve with --network egress (or network = "egress" in bundle.toml)'
        )
    return None


def _spec(task: HarborTask, manifest: HarborManifest, policy: str) -> SandboxSpec:
    environment = task.config.environment
    online = policy == "egress" and task.config.network_mode != NetworkMode.NO_NETWORK
    return SandboxSpec(
        env_name=task.id,
        context_dir=task.environment_dir,
        command=KEEPER,
        resources=Resources(
            cpus=min(environment.cpus or manifest.resources.cpus, float(os.cpu_count() or 1)),
            memory_mb=environment.memory_mb or manifest.resources.memory_mb,
            pids=manifest.resources.pids,
            disk_mb=environment.storage_mb or manifest.resources.disk_mb,
        ),
        network="egress" if online else "none",
        user=_user(task.config.agent.user),
        workdir=environment.workdir,
        environment=tuple(sorted(environment.env.items())),
        writable_root=True,
    )


def _task(task: HarborTask, manifest: HarborManifest) -> Task:
    return Task(
        id=task.id,
        env=task.id,
        prompt=task.instruction,
        system_prompt=manifest.system_prompt,
        tools=list(manifest.tools) if manifest.tools else None,
        verifiers={SCORE: task.id},
        time_budget_s=task.config.agent.timeout_sec,
        failure_score=manifest.failure_score,
    )


def _tests(task: HarborTask) -> RewardFileVerifier:
    verifier = task.config.verifier
    return RewardFileVerifier(
        command=["/bin/sh", "-c", RUN_TESTS],
        files=[str(task.tests_dir)],
        timeout_s=verifier.timeout_sec,
        user=_user(verifier.user),
        environment=verifier.env,
    )


def _splits(
    root: Path,
    manifest: HarborManifest,
    tasks: dict[str, Task],
    read: dict[str, HarborTask],
    left_out: list[Problem],
    problems: list[Problem],
) -> dict[str, list[Task]]:
    """`all`, `train` (the tasks in no other split, unless [splits] names it), then the splits of
    [splits] and of `split_by`, by name. A split may name a task left out: it is skipped."""
    where = f"{root.name}/bundle.toml"
    known = set(tasks) | {problem.file.rsplit("/", 1)[-1] for problem in left_out}
    named: dict[str, list[Task]] = {}
    for split, ids in manifest.splits.items():
        if split == RESERVED_SPLIT:
            problems.append(Problem(where, "[splits] all: the split 'all' is every task; rename it"))
            continue
        unknown = [task_id for task_id in ids if task_id not in known]
        if unknown:
            problems.append(Problem(where, f"[splits] {split} names tasks that are not here: {', '.join(unknown[:5])}"))
        named[split] = [tasks[task_id] for task_id in ids if task_id in tasks]
    if manifest.split_by:
        for task_id, task in read.items():
            value = task.config.metadata.get(manifest.split_by)
            if isinstance(value, (str, int)) and str(value) != RESERVED_SPLIT:
                named.setdefault(str(value), []).append(tasks[task_id])
    listed = {task.id for split in named.values() for task in split}
    train = named.pop(TRAIN_SPLIT) if TRAIN_SPLIT in named else [t for t in tasks.values() if t.id not in listed]
    return {RESERVED_SPLIT: list(tasks.values()), TRAIN_SPLIT: train, **dict(sorted(named.items()))}


def _user(user: str | int | None) -> str:
    """task.toml's user as docker takes it: "" for the image's own USER."""
    return "" if user is None else str(user)


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip("-_.") or "harbor"
