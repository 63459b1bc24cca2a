"""What bench/mutation.py mutates and which tests judge it: the modules, the test files
written to check each, the fast tests the coverage run records, and the operators kept."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "mutation"
REACH_CACHE = REPO / ".mutation-reach.json"  # the coverage run's findings, while no code or test changes

# The fast tests: unit and integration, less the few that drive a kernel, a terminal or a load;
# the docker sandbox's own tests (seconds each, on a running engine: not an engine stopped,
# nor images built); and the provider contract suite's runs on the local and docker sandboxes
# and on the modal sandbox against tests/contract/fake_modal.py.
DOCKER_TESTS = tuple(
    f"tests/docker/test_{name}.py"
    for name in ("provider", "hardening", "channel", "commands", "warm_pool", "reaper", "forgery_docker")
)
FAST_TESTS = ["tests/unit", "tests/integration", *DOCKER_TESTS]
CONTRACT_TESTS, CONTRACT_ON = "tests/contract/test_provider_contract.py", ("[local]", "[docker]", "[modal-fake]")
# A mutant runs the fastest tests that reach it up to this much of their own time: a survivor
# is one that the quickest checks of its line let through (slower ones might still catch it).
TEST_SECONDS = 10.0
OWN_TEST_SECONDS = 30.0  # and the module's own test file, which is written to check it, up to this
SLOW_TESTS = [
    "tests/integration/test_load.py",
    "tests/integration/test_notebook.py",
    "tests/integration/test_play_terminal.py",
]


@dataclass(frozen=True)
class Target:
    path: str
    own_tests: tuple[
        str, ...
    ] = ()  # the test files (or tests) written to check it: run first, on a budget of their own
    # Tests that run the module where the coverage run does not see it (a child process, a suite
    # outside the fast tests): run first for every mutant.
    child_tests: tuple[str, ...] = ()


UNIT, INTEGRATION = "tests/unit/", "tests/integration/"
ENDINGS_TESTS = INTEGRATION + "test_endings.py"  # how episodes end, and the warning of one left unscored
LOCAL_TESTS = (
    INTEGRATION + "test_local_isolation.py",
    INTEGRATION + "test_local_anywhere.py",
    CONTRACT_TESTS,
    UNIT + "test_sandbox_providers.py",
)
# The local sandbox of a server that is not root, run as another user in a child process.
LOCAL_AS_NOBODY = tuple(
    INTEGRATION + "test_local_isolation.py::" + test
    for test in (
        "test_a_restarted_server_removes_what_a_killed_one_of_its_instance_left[nobody]",
        "test_a_user_other_than_root_checks_a_bundle_and_starts_envs_in_a_folder_of_its_own",
    )
)
MODULES = {
    "episode": Target(
        "server/corral/server/episodes/episode.py",
        (
            UNIT + "test_episode_endings.py",
            INTEGRATION + "test_episodes.py",
            ENDINGS_TESTS,
            INTEGRATION + "test_mcp_env.py",
            UNIT + "test_tool_answers.py",
            INTEGRATION
            + "test_records.py::test_an_episodes_record_holds_every_call_in_order_with_answers_errors_and_timing",
        ),
    ),
    "endings": Target("server/corral/server/episodes/endings.py", (ENDINGS_TESTS,)),
    "canary": Target("server/corral/server/episodes/canary.py", (UNIT + "test_episode_endings.py", ENDINGS_TESTS)),
    "scoring": Target(
        "server/corral/server/episodes/scoring.py",
        (UNIT + "test_episode_endings.py", ENDINGS_TESTS, INTEGRATION + "test_command_verifiers.py"),
    ),
    "env_inprocess": Target("server/corral/server/connection/inprocess.py", (UNIT + "test_env_inprocess.py",)),
    "env_connection": Target(
        "server/corral/server/connection/base.py",
        (UNIT + "test_env_inprocess.py", UNIT + "test_envproc.py", UNIT + "test_episode_endings.py"),
    ),
    "sessions": Target(
        "server/corral/server/serving/sessions.py",
        (
            INTEGRATION + "test_openenv_compat.py",
            ENDINGS_TESTS,
            INTEGRATION + "test_records.py::test_a_reset_naming_a_task_alone_records_the_split_the_task_belongs_to",
        ),
    ),
    "verifiers": Target(
        "server/corral/server/bundles/verifiers.py",
        (UNIT + "test_verifiers.py", INTEGRATION + "test_command_verifiers.py"),
    ),
    "envproc": Target("server/corral/server/connection/stdio.py", (UNIT + "test_envproc.py",)),
    "local": Target("sandboxes/corral/sandboxes/local/provider.py", LOCAL_TESTS, child_tests=LOCAL_AS_NOBODY),
    "local_sandbox": Target("sandboxes/corral/sandboxes/local/sandbox.py", LOCAL_TESTS, child_tests=LOCAL_AS_NOBODY),
    "local_procs": Target("sandboxes/corral/sandboxes/local/procs.py", LOCAL_TESTS),
    "local_files": Target("sandboxes/corral/sandboxes/local/files.py", LOCAL_TESTS),
    "docker": Target("sandboxes/corral/sandboxes/docker/sandbox.py", (CONTRACT_TESTS, *DOCKER_TESTS)),
    "modal": Target(
        "sandboxes/corral/sandboxes/modal/sandbox.py",
        (CONTRACT_TESTS,),
        child_tests=("tests/contract/test_modal_provider.py",),
    ),
    "warm_pool": Target("sandboxes/corral/sandboxes/shared/warm_pool.py"),
    "stream_buffers": Target("sandboxes/corral/sandboxes/shared/stream_buffers.py", (UNIT + "test_stream_buffers.py",)),
    "live_sandboxes": Target(
        "sandboxes/corral/sandboxes/shared/live_sandboxes.py", (UNIT + "test_sandbox_providers.py",)
    ),
    "factory": Target("client/corral/client/factory.py", (UNIT + "test_client_factory.py",)),
    "session": Target(
        "client/corral/client/session.py", (INTEGRATION + "test_client_session.py", INTEGRATION + "test_many_hosts.py")
    ),
    "client_episode": Target("client/corral/client/episode.py"),
    "environment_records": Target(
        "client/corral/client/environment_records.py",
        (INTEGRATION + "test_environment_records.py", UNIT + "test_rollout_accounting.py"),
    ),
    "rollout_place": Target(
        "client/corral/client/rollout_place.py",
        (UNIT + "test_rollout_accounting.py", INTEGRATION + "test_environment_records.py"),
    ),
    "runtime": Target(
        "sandboxes/corral/env/runtime.py", (UNIT + "test_env_runtime.py",), child_tests=(UNIT + "test_env_runtime.py",)
    ),
}

# One replacement per operator site: enough to show a test notices the operator at all
# (selective mutation), at a tenth of the runs of every replacement.
KEPT_OPERATORS = {
    "NumberReplacer",
    "AddNot",
    "ReplaceUnaryOperator_Delete_Not",
    "ReplaceTrueWithFalse",
    "ReplaceFalseWithTrue",
    "ReplaceAndWithOr",
    "ReplaceOrWithAnd",
    "ExceptionReplacer",
    "ZeroIterationForLoop",
    "ReplaceContinueWithBreak",
    "ReplaceBreakWithContinue",
    "RemoveDecorator",
    "ReplaceUnaryOperator_USub_UAdd",
    "ReplaceBinaryOperator_Add_Sub",
    "ReplaceBinaryOperator_Sub_Add",
    "ReplaceBinaryOperator_Mul_Div",
    "ReplaceBinaryOperator_Div_Mul",
    "ReplaceBinaryOperator_FloorDiv_Mul",
    "ReplaceBinaryOperator_Mod_FloorDiv",
    "ReplaceBinaryOperator_Pow_Mul",
    "ReplaceBinaryOperator_BitOr_BitAnd",
    "ReplaceBinaryOperator_BitAnd_BitOr",
    "ReplaceBinaryOperator_BitXor_BitOr",
    "ReplaceBinaryOperator_LShift_RShift",
    "ReplaceBinaryOperator_RShift_LShift",
    "ReplaceComparisonOperator_Eq_NotEq",
    "ReplaceComparisonOperator_NotEq_Eq",
    "ReplaceComparisonOperator_Lt_LtE",
    "ReplaceComparisonOperator_LtE_Lt",
    "ReplaceComparisonOperator_Gt_GtE",
    "ReplaceComparisonOperator_GtE_Gt",
    "ReplaceComparisonOperator_Is_IsNot",
    "ReplaceComparisonOperator_IsNot_Is",
    "ReplaceComparisonOperator_In_NotIn",
    "ReplaceComparisonOperator_NotIn_In",
}
