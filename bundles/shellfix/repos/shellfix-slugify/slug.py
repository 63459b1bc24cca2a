"""URL slugs from titles."""

import re


def slugify(title: str) -> str:
    """Lower-case letters and digits, words joined by single dashes, none at either end."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower())
    return slug
