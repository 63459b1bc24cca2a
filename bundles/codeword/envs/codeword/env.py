"""CodeWord: each task hides a table of code words and their numbers; the agent looks its code
word up and submits the number. The first submission counts."""

from corral.env import Env, tool


class CodeWord(Env):
    def reset(self, args: dict) -> None:
        self.numbers: dict[str, int] = args["numbers"]
        self.lookups: list[str] = []
        self.submitted: list[int] = []

    @tool
    def lookup(self, word: str) -> dict:
        """The number of a code word.

        Args:
            word: the code word.
        """
        self.lookups.append(word)
        if word not in self.numbers:
            return {"error": f"no code word {word!r}"}
        return {"number": self.numbers[word]}

    @tool
    def submit(self, number: int) -> dict:
        """Submit the number; the first submission counts.

        Args:
            number: the code word's number.
        """
        self.submitted.append(number)
        return {"submitted": number}

    def report(self) -> dict:
        return {"lookups": self.lookups, "submitted": self.submitted}
