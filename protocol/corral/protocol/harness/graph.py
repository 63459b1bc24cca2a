"""The token-prefix graph of an episode's model calls: which call continues which.

An agent's calls are not a list. It retries a call, asks for a title on the side, compacts its
history, starts a sub-agent, or continues one history twice in parallel. Read from the engine's
ids alone (arrival order does not matter):
- a call's parent is the call whose prompt+completion ids are the longest exact prefix of its
  prompt ids; a call with none (a first call, a compacted history, a sub-agent's own system
  prompt) is a root;
- calls with one parent and the same prompt ids are attempts at one turn: those nothing
  continued are retries (the last attempt is kept where none was continued);
- a call offering no tools, in an episode whose other calls do, is a side call (a title, a
  summary): kept, counted, not trained;
- the rest are the training calls; each root-to-leaf path over them is one training row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from corral.protocol.harness.calls import CapturedCall

CallKind = Literal["main", "side_call", "retry"]


@dataclass
class CallGraph:
    """The calls placed by token prefix. Build with `CallGraph.build(calls)`."""

    calls: dict[str, CapturedCall]  # by node id, in arrival order
    parents: dict[str, str | None]  # the prefix parent of every call
    kinds: dict[str, CallKind]
    children: dict[str, list[str]] = field(default_factory=dict)  # training children, in arrival order

    @classmethod
    def build(cls, calls: Sequence[CapturedCall]) -> CallGraph:
        by_id = {call.node_id: call for call in calls}
        fulls = [(call.prompt_token_ids + call.completion_token_ids, call) for call in calls]
        ranked = [pair for _, pair in sorted(enumerate(fulls), key=lambda item: (-len(item[1][0]), item[0]))]
        parents = {call.node_id: _prefix_parent(call, ranked) for call in calls}
        kinds = _kinds(calls, parents)
        graph = cls(by_id, parents, kinds)
        graph.children = {node: [] for node, kind in kinds.items() if kind == "main"}
        for node in graph.children:
            if (parent := graph.training_parent(node)) is not None:
                graph.children[parent].append(node)
        return graph

    def kind(self, node_id: str) -> CallKind:
        return self.kinds[node_id]

    def training_parent(self, node_id: str) -> str | None:
        """The nearest ancestor that is a training call (a side call between is skipped)."""
        parent = self.parents[node_id]
        while parent is not None and self.kinds[parent] != "main":
            parent = self.parents[parent]
        return parent

    @property
    def roots(self) -> list[str]:
        return [node for node in self.children if self.training_parent(node) is None]

    @property
    def retries(self) -> list[str]:
        return [node for node, kind in self.kinds.items() if kind == "retry"]

    @property
    def side_calls(self) -> list[str]:
        return [node for node, kind in self.kinds.items() if kind == "side_call"]

    @property
    def paths(self) -> list[list[str]]:
        """Every root-to-leaf path over the training calls, depth first: one training row each."""
        found: list[list[str]] = []

        def walk(node: str, above: list[str]) -> None:
            path = [*above, node]
            if not self.children[node]:
                found.append(path)
            for child in self.children[node]:
                walk(child, path)

        for root in self.roots:
            walk(root, [])
        return found

    def training_order(self) -> list[CapturedCall]:
        """The training calls depth first, each once: a path's calls follow one another, so a
        reader that forks on any drift (TRL under `lossless_capture`) makes one row per path."""
        seen: dict[str, None] = {}
        for path in self.paths:
            seen.update(dict.fromkeys(path))
        return [self.calls[node] for node in seen]

    def sequence(self, path: Sequence[str]) -> tuple[list[int], list[int], list[float]]:
        """A path flattened into one row: ids, loss mask (1 on sampled ids only) and logprobs
        (0.0 under context). Each call's prompt extends the row so far by construction."""
        ids: list[int] = []
        mask: list[int] = []
        logps: list[float] = []
        for node in path:
            call = self.calls[node]
            tail = call.prompt_token_ids[len(ids) :]
            ids += tail + call.completion_token_ids
            mask += [0] * len(tail) + [1] * len(call.completion_token_ids)
            logps += [0.0] * len(tail) + call.per_token_logps
        return ids, mask, logps


def _prefix_parent(call: CapturedCall, ranked: Sequence[tuple[list[int], CapturedCall]]) -> str | None:
    """The call whose prompt+completion is the longest exact prefix of `call`'s prompt; among
    equal ones (attempts that sampled the same answer), the first to arrive. `ranked` holds
    every call's prompt+completion, longest first: the first that matches is the parent, so a
    call costs one full comparison, not one per ancestor (a long chain's are all prefixes)."""
    prompt = call.prompt_token_ids
    for full, other in ranked:
        fits = other is not call and 0 < len(full) <= len(prompt)
        # The last token first: it rules out nearly every call that is not an ancestor, cheaply.
        if fits and prompt[len(full) - 1] == full[-1] and prompt[: len(full)] == full:
            return other.node_id
    return None


def _kinds(calls: Sequence[CapturedCall], parents: dict[str, str | None]) -> dict[str, CallKind]:
    continued = {parent for parent in parents.values() if parent is not None}
    attempts: dict[tuple[str | None, tuple[int, ...]], list[str]] = {}
    for call in calls:
        if call.prompt_token_ids:  # without ids no two calls are known to be one turn
            attempts.setdefault((parents[call.node_id], tuple(call.prompt_token_ids)), []).append(call.node_id)
    retries: set[str] = set()
    for nodes in attempts.values():
        kept = [node for node in nodes if node in continued] or nodes[-1:]
        retries.update(node for node in nodes if node not in kept)
    any_tools = any(call.offers_tools for call in calls)
    kinds: dict[str, CallKind] = {}
    for call in calls:
        if call.node_id in retries:
            kinds[call.node_id] = "retry"
        elif any_tools and not call.offers_tools:
            kinds[call.node_id] = "side_call"
        else:
            kinds[call.node_id] = "main"
    return kinds
