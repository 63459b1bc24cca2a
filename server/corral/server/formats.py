"""Bundle formats: each recognises its own folders and reads them into the one bundle model.

Two ship: Harbor's task folders (`harbor.loader.HarborFormat`, the older task.yaml form
included) and corral's own bundle folder (`bundle.CorralFormat`). The first format in
`FORMATS` that recognises a folder reads it; what serving its bundle needs beyond the model,
it puts in `LoadedBundle.extension`. Adding a format is a module with a class like theirs,
listed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from corral.server.bundles.folder import CorralFormat
from corral.server.bundles.format import Manifest
from corral.server.bundles.model import LoadedBundle
from corral.server.bundles.problems import Problem
from corral.server.harbor.loader import HarborFormat


class BundleFormat(Protocol):
    """A kind of folder corral serves: it says whether a folder is one, and reads it."""

    name: str
    looks_for: str  # what marks its folders, said when no format recognises one

    def recognises(self, folder: Path) -> bool:
        """Whether `folder` is one of this format's; `folder` is an existing folder."""
        ...

    def load(self, folder: Path, *, network: str | None) -> LoadedBundle:
        """Read `folder`; never raise for a broken bundle: list its problems in `problems`.
        `network` is the operator's policy for tasks that ask for one ("none" or "egress"),
        None for the bundle's own (a format without networks ignores it)."""
        ...


# Harbor's first: a folder of Harbor tasks may hold a bundle.toml of its own.
FORMATS: list[BundleFormat] = [HarborFormat(), CorralFormat()]


def load_bundle(root: Path, *, network: str | None = None) -> LoadedBundle:
    """Read the bundle at `root` with the first of FORMATS that recognises it;
    `bundle.problems` lists what is wrong (empty when clean)."""
    root = Path(root).resolve()
    if not root.is_dir():
        return _unread(root, "no such folder; give the path of a bundle folder")
    for bundle_format in FORMATS:
        if bundle_format.recognises(root):
            return bundle_format.load(root, network=network)
    return _unread(root, _not_recognised(FORMATS))


def _not_recognised(formats: Sequence[BundleFormat]) -> str:
    tried = "; ".join(f"{bundle_format.name}: {bundle_format.looks_for}" for bundle_format in formats)
    return f"no bundle format recognises this folder (tried {tried}); add what one of them looks for"


def _unread(root: Path, message: str) -> LoadedBundle:
    return LoadedBundle(root, Manifest(name="missing"), "", {}, {}, {}, {}, [Problem(str(root), message)])
