"""Counting words in a text."""

import re


def count_words(text: str) -> dict[str, int]:
    """How often each word occurs, ignoring case: keys are lower-case words."""
    counts: dict[str, int] = {}
    for word in re.findall(r"[A-Za-z']+", text):
        counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(text: str, n: int) -> list[tuple[str, int]]:
    """The `n` most frequent words with their counts, most frequent first, ties A-Z."""
    counts = count_words(text)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
