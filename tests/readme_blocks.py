"""The Python code blocks of README.md, as a reader meets them: each with the reason it is not
run here, when an HTML comment right above it gives one (`<!-- not run: needs a GPU box -->`)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

BLOCK = re.compile(r"(?:<!--\s*not run:\s*(?P<reason>.*?)\s*-->\n)?```python\n(?P<code>.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    line: int  # where its code starts in the file
    code: str
    not_run: str | None  # why it cannot run here, as the README says

    @property
    def imports(self) -> str:
        """Its import statements alone: what a block that is not run must still find."""
        tree = ast.parse(self.code)
        return "\n".join(ast.unparse(node) for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom))


def python_blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [
        Block(text.count("\n", 0, match.start("code")) + 1, match["code"], match["reason"])
        for match in BLOCK.finditer(text)
    ]
