"""Mutation testing of corral's core modules: which planted bugs the fast tests catch.

    python bench/mutation.py                     # every module below (hours: sample with --most)
    python bench/mutation.py episode sessions    # some of them
    python bench/mutation.py --again sessions    # its survivors only, after mending tests
    python bench/mutation.py --most 40 local     # a random sample of 40 more of its mutants

Run it in a clone you are not editing: each mutant is written into its source file in
place (by cosmic-ray, which puts the file back after the mutant's run).

1. One coverage run of the fast tests (unit and integration, the provider contract suite
   on the local and docker sandboxes and on the stand-in for Modal's cloud, and the docker
   sandbox's own tests: a Docker engine must be running) records which test reaches each
   line of the modules, and how long each test takes.
2. cosmic-ray lists the mutants of each module, with a selective set of its operators: one
   replacement per operator site (`-` becomes `+`, `<` becomes `<=`, not all ten of
   each), none inside type annotations (`str | None` is not behaviour).
3. Each mutant runs the tests that reach its line (those of the module's own test files
   first, up to OWN_TEST_SECONDS of their time, then the others up to TEST_SECONDS; in each
   group those that run the rare lines of its function first, then the fastest), stopping
   at the first failure. A mutant is killed only when a test fails on it (pytest's exit
   status 1); one whose tests pytest could not collect or run (status 2 to 5), that crashed
   them or that outlasted their timeout is inconclusive, reported apart and left out of the
   scores. A line run while the tests were imported is reached by every test that reaches
   the module.
   A module's `child_tests`, which run it where the coverage run does not see (the env
   runtime and the local sandbox of a server that is not root, in child processes; the modal
   provider's own tests against the stand-in for Modal's cloud), run first for each of its
   mutants.
4. Per module: the score (killed / judged by a test, and again less the survivors of a kind
   that cannot change behaviour: asserts, frozen flags, tuning constants), every survivor with its
   diff, printed and kept in bench/results/mutation/NAME.md; results are cached per mutant in
   NAME.json, so a run stopped halfway goes on where it stopped. A result holds while the
   mutant's function and the tests it ran are unchanged (their files, the conftest.py files
   above them and the test-suite modules they import: mutation_cache.py): an edited
   function's mutants, and those whose tests were edited, run again.

The modules beside this one hold its parts: mutation_targets (what is mutated, which tests
judge it), mutation_reach (the coverage run), mutation_choice (a mutant's tests),
mutation_runs (making and running mutants), mutation_cache (when a result holds) and
mutation_survivors (survivors that cannot change behaviour).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from mutation_cache import still_holds
from mutation_choice import tests_for
from mutation_reach import Reach, measure_reach
from mutation_runs import INCONCLUSIVE, keyed, mutants_of, run_mutant
from mutation_survivors import equivalence
from mutation_targets import MODULES, REPO, RESULTS, Target


def test_module(
    name: str, target: Target, reach_of: Callable[[], Reach], workdir: Path, *, again: bool, most: int | None
) -> tuple[dict[str, dict], int]:
    """Run the module's mutants not run yet (at most `most` of them; with `again`, its survivors
    first, and only those unless `most` is given), in an order shuffled once for all: a run
    stopped early has run a uniform sample. The results so far, and the count
    of its mutants."""
    source = (REPO / target.path).read_bytes()
    mutants = keyed(target.path, mutants_of(target.path, workdir))
    cache = RESULTS / f"{name}.json"
    saved = json.loads(cache.read_text())["results"] if cache.exists() else {}
    changed = [key for key, result in saved.items() if not still_holds(result)]
    saved = {key: result for key, result in saved.items() if key not in changed}
    results = {key: {**saved[key], "line": spec.start_pos[0]} for key, spec in mutants.items() if key in saved}
    if again:  # tests other than those they ran may catch them now: try every mutant not killed
        results = {key: result for key, result in results.items() if result["outcome"] == "killed"}
    print(
        f"\n{name} ({target.path}): {len(mutants)} mutants, {len(results)} already run"
        + (f" ({len(changed)} more dropped: the tests they ran changed)" if changed else ""),
        flush=True,
    )
    retry = [key for key in mutants if key in saved and key not in results]  # the survivors, with --again
    unrun = sorted((key for key in mutants if key not in saved), key=lambda key: hashlib.sha256(key.encode()).digest())
    to_run = retry + ([] if again and most is None else unrun[:most])  # --again alone: the survivors only
    for number, key in enumerate(to_run, 1):
        spec = mutants[key]
        reach = reach_of()  # measured once, when a mutant first needs it
        result = run_mutant(spec, tests_for(spec, target, reach), reach)
        results[key] = {"line": spec.start_pos[0], "operator": key.split("|")[0], **result}
        print(
            f"  {number}/{len(to_run)} line {spec.start_pos[0]} {results[key]['operator']}: "
            f"{result['outcome']} ({result['why']}, {result.get('seconds', 0)} s)",
            flush=True,
        )
        cache.write_text(json.dumps({"results": results}, indent=1))
        if (REPO / target.path).read_bytes() != source:
            sys.exit(f"{target.path} was not restored after a mutant: stop and check it")
    return results, len(mutants)


def report(name: str, target: Target, results: dict[str, dict], total: int) -> str:
    """The module's score (killed among the mutants a test judged) and its survivors, those of a
    kind that cannot change behaviour set apart with the reason (and left out of the second
    score); then the mutants no test judged (not run, crashed, timed out), each with why."""
    source = (REPO / target.path).read_text().splitlines()
    # cosmic-ray fails to make a few mutants (an ExceptionReplacer on a tuple of dotted names):
    # not a mutant, so left out of the scores, and counted below them.
    unmade = [result for result in results.values() if result["outcome"] == "error"]
    results = {key: result for key, result in results.items() if result["outcome"] != "error"}
    inconclusive = sorted(
        (result for result in results.values() if result["outcome"] in INCONCLUSIVE), key=lambda result: result["line"]
    )
    judged = [result for result in results.values() if result["outcome"] not in INCONCLUSIVE]
    if not results:
        title = f"# {name}: not run yet ({total} mutants; `--most N {name}` runs a random sample of them)"
        (RESULTS / f"{name}.md").write_text(title + "\n")
        return title[2:]
    survivors = sorted(
        (result for result in judged if result["outcome"] != "killed"), key=lambda result: result["line"]
    )
    whys = [equivalence(result, source[result["line"] - 1], target.path) for result in survivors]
    unexplained = whys.count(None)
    killed, counted = len(judged) - len(survivors), len(judged) - len(survivors) + unexplained
    title = (
        f"# {name}: {killed}/{len(judged)} mutants killed ({killed / max(len(judged), 1):.0%}); "
        f"{killed}/{counted} ({killed / max(counted, 1):.0%}) less {len(survivors) - unexplained} "
        "that cannot change behaviour"
    )
    if inconclusive:
        kinds = ", ".join(
            f"{count} {kind}"
            for kind in INCONCLUSIVE
            if (count := sum(result["outcome"] == kind for result in inconclusive))
        )
        title += f"; {len(inconclusive)} judged by no test ({kinds}), out of the scores"
    if len(results) < total:
        title += f" (a random sample: {len(results)} of its {total} mutants run)"
    lines = [title, "", f"`{target.path}`; survivors below, each with its diff.", ""]
    if unmade:
        where = ", ".join(str(result["line"]) for result in unmade)
        lines += [f"cosmic-ray could not make {len(unmade)} mutant(s) (lines {where}): left out of the scores.", ""]
    for result, why in zip(survivors, whys, strict=True):
        lines += [
            f"## line {result['line']}: {result['operator']} ({result['outcome']}: {result['why']})",
            *([f"Cannot change behaviour: {why}."] if why else []),
            "",
            "```diff",
            result.get("diff", "").strip(),
            "```",
            "",
        ]
    if inconclusive:
        lines += [
            "# Judged by no test",
            "",
            (
                "pytest could not collect or run the tests (exit status 2 to 5), they crashed, or they outlasted "
                "their timeout: no test failed on these mutants, so they count neither way."
            ),
            "",
        ]
    for result in inconclusive:
        output = "\n".join(result.get("output", "").strip().splitlines()[-10:])
        lines += [
            f"## line {result['line']}: {result['operator']} ({result['outcome']}: {result['why']})",
            "",
            "```diff",
            result.get("diff", "").strip(),
            "```",
            "",
            "```text",
            output,
            "```",
            "",
        ]
    (RESULTS / f"{name}.md").write_text("\n".join(lines))
    return title[2:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", metavar="MODULE", help=f"some of: {', '.join(MODULES)} (default: all)")
    parser.add_argument(
        "--again",
        action="store_true",
        help="run the survivors of the last run again (after mending tests); with --most N, N new ones too",
    )
    parser.add_argument(
        "--most",
        type=int,
        metavar="N",
        help="run at most N more mutants of each module (a random sample; a later run goes on)",
    )
    args = parser.parse_args()
    names = args.modules or list(MODULES)
    if unknown := sorted(set(names) - set(MODULES)):
        parser.error(f"no module named {', '.join(unknown)}; pick from {', '.join(MODULES)}")
    os.environ["CI"] = "true"  # a test that would skip fails instead, as in CI
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped, it still puts back the mutated file
    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="corral-mutation-") as scratch:
        workdir = Path(scratch)
        reach_of = functools.cache(lambda: measure_reach(workdir))
        summaries = [
            report(
                name,
                MODULES[name],
                *test_module(name, MODULES[name], reach_of, workdir, again=args.again, most=args.most),
            )
            for name in names
        ]
    print("\n" + "\n".join(summaries))


if __name__ == "__main__":
    main()
