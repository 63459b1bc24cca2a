"""Grade a code-word episode: 0.3 for looking the code word up, 0.7 for submitting its number
first. So 1.0 is a perfect episode, 0.7 a right guess without the lookup, 0.3 the right lookup
and a wrong (or no) number, 0 neither: a graded reward that a small model can climb."""

LOOKUP_SCORE, SUBMIT_SCORE = 0.3, 0.7


def verify(task: dict, report: dict) -> float:
    args = task["args"]
    looked_up = args["word"] in report["lookups"]
    submitted = report["submitted"][:1] == [args["numbers"][args["word"]]]
    return round(LOOKUP_SCORE * looked_up + SUBMIT_SCORE * submitted, 2)
