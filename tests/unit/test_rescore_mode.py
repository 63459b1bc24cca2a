"""A verifier says whether `corral rescore` may run it again (`RESCORE`), and `corral check`
reports a value it does not know, with the fix."""

import pytest

from tests.unit.test_bundle_check import VERIFIER, corral_check, problem_lines, write, write_bundle


@pytest.mark.bwrap
@pytest.mark.parametrize(
    ("declared", "problem"),
    [
        ('RESCORE = "no"\n', None),
        (
            'RESCORE = "sometimes"\n',
            (
                'tiny/verifiers/total.py: RESCORE = \'sometimes\' is not one of "stateless", "state", "no"; set it '
                'to one of them as a plain string (or leave it out: "stateless")'
            ),
        ),
    ],
)
def test_check_reports_a_verifier_that_declares_no_rescore_mode_it_knows(tmp_path, declared, problem):
    bundle = write_bundle(tmp_path)
    write(bundle / "verifiers" / "total.py", declared + VERIFIER)

    result = corral_check(bundle)

    assert result.exit_code == (0 if problem is None else 1), result.output
    assert problem_lines(result.output) == ([] if problem is None else [problem])
