"""Walking an ONNX graph: who makes and who reads each tensor, what a tensor is computed
from, and the nodes and initializers a rewrite leaves unused.

The graph rewrites (:mod:`appliance.model.relattn`, :mod:`appliance.model.layernorm`,
:mod:`appliance.model.noise`, :mod:`appliance.model.margins`) and the cut
(:mod:`appliance.model.voices.cut`) all look tensors up by name; these are the maps and
walks they share.  Each function takes an ``onnx.GraphProto`` and says whether it only
reads it or changes it in place.  None of them looks inside a node's subgraphs (``If``,
``Loop``), so a subgraph's reads of outer names go unseen: the graphs a Piper voice is
exported as have none (:mod:`appliance.model.relattn` checks before it rewrites).
Tensor names are compared as they are, ``""`` (an omitted optional input) included,
unless a function says otherwise.

Plain functions of their arguments, no state between calls and no locks: the cut runs
them when a voice is first prepared (at start, on a reload, when one is added), on
whichever worker thread loads it; two threads may walk two graphs at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx


def producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """Each tensor a node writes → that node (read-only; graph inputs and initializers
    have none; of two nodes writing one name, the later)."""
    return {out: node for node in graph.node for out in node.output}


def producer_positions(graph: onnx.GraphProto) -> dict[str, int]:
    """Each tensor a node writes → that node's index in ``graph.node`` (read-only; as
    :func:`producers`), for a caller that inserts nodes after it."""
    return {out: i for i, node in enumerate(graph.node) for out in node.output}


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Each tensor some node reads → those nodes, in graph order (read-only).  A node is
    listed once per input that names the tensor: ``Mul(x, x)`` is two readers of ``x``."""
    out: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            out.setdefault(name, []).append(node)
    return out


def ancestors(producers: Mapping[str, onnx.NodeProto], tensor: str) -> set[str]:
    """The tensors ``tensor`` is computed from, itself included (``producers`` from
    :func:`producers`); ``""`` (an omitted input) is never one."""
    seen: set[str] = set()
    todo = [tensor]
    while todo:
        t = todo.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        node = producers.get(t)
        if node is not None:
            todo.extend(node.input)
    return seen


def descendant_nodes(graph: onnx.GraphProto, tensors: Iterable[str]) -> list[onnx.NodeProto]:
    """The nodes that depend on any of ``tensors``, in graph order (read-only).  One pass
    in graph order: right for a graph stored topologically sorted, as ONNX asks."""
    reached = set(tensors)
    out = []
    for node in graph.node:
        if any(i in reached for i in node.input):
            out.append(node)
            reached.update(node.output)
    return out


def prune(graph: onnx.GraphProto) -> None:
    """Drop, in place, the nodes nothing reaches the graph's outputs through, then the
    initializers the kept nodes do not read and no output names.  An initializer that is
    also a graph input goes too when unused (unlike :func:`prune_initializers`).  One
    backward pass: ``graph`` must be topologically sorted (:func:`topological_sort`)."""
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if set(node.output) & needed:
            keep.append(node)
            needed.update(node.input)
    keep.reverse()
    del graph.node[:]
    graph.node.extend(keep)
    _keep_initializers(graph, needed)


def prune_initializers(graph: onnx.GraphProto) -> None:
    """Drop, in place, the initializers no node reads and no graph input or output names
    (ONNX Runtime warns about each unused one whenever a session loads the graph).  The
    nodes stay as they are."""
    used = {i for node in graph.node for i in node.input}
    used |= {v.name for v in (*graph.output, *graph.input)}
    _keep_initializers(graph, used)


def _keep_initializers(graph: onnx.GraphProto, names: set[str]) -> None:
    kept = [t for t in graph.initializer if t.name in names]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def topological_sort(graph: onnx.GraphProto, what: str = "graph") -> None:
    """Reorder ``graph.node`` in place so that each node comes after the nodes whose
    outputs it reads (ONNX asks for it): pass after pass, each taking in graph order the
    nodes whose inputs are graph inputs, initializers, ``""`` or made by a node already
    taken.  :class:`ValueError` ("the ``what`` has a cycle or a missing input") when a
    pass takes none."""
    ready = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending = list(graph.node)
    done: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for node in pending:
            if all(i in ready for i in node.input):
                done.append(node)
                ready.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise ValueError(f"the {what} has a cycle or a missing input")
        pending = rest
    del graph.node[:]
    graph.node.extend(done)
