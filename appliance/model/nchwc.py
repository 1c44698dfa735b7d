"""Element-wise operators kept in ONNX Runtime's blocked (NCHWc) layout between its convolutions.

ONNX Runtime's NCHWc pass runs 2-D convolutions on channel-blocked tensors and
converts back to the plain layout before any operator it does not list.  In a
HiFi-GAN decoder every ``LeakyRelu`` and every residual ``Add`` sits between two
convolutions, so each convolution paid a ``ReorderOutput`` and a ``ReorderInput``:
~13 % of the 2-D decoder's time (docs/speed.md, "The decoder kept blocked").  An
element-wise operator computes each element alone, so it gives the same floats on a
blocked tensor as on a plain one:
:func:`keep_blocked` rewrites a graph *as ONNX Runtime optimised it* (saved with
``optimized_model_filepath``) so that those operators read and write the blocked
tensors and the conversions go, leaving them only where a plain layout is needed
(a ``Slice`` on the time axis, a ``ConvTranspose``, the graph's output).

Then :func:`fold_sums` folds each residual ``Add`` into the blocked convolution before it,
as that convolution's ``Sum`` input (added in its output loop, not in a pass of its own):
2–5 % of a window more, but no longer bit for bit, ~7e-8 from ONNX Runtime's graph (the
three terms are added in another order).

The optimised graph is specific to the machine (the block size is the CPU's vector
width) and to the ONNX Runtime that wrote it: it is made where it runs, checked against
the optimised graph's samples on a probe window before it is used, and kept for that
machine (``appliance.model.engine.blocked``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

NCHWC = "com.microsoft.nchwc"
BLOCKED = "__nchwc"
"""The suffix of the blocked twins :func:`keep_blocked` makes."""

LAYOUT_FREE = frozenset({"Add", "Sub", "Mul", "Div", "LeakyRelu", "Relu", "Tanh", "Sigmoid"})
"""Operators whose every output element depends on the same element of each input (or on
a scalar): the layout of their tensors does not matter."""


class _Rewrite:
    """One pass over the nodes in order: each plain tensor gets a blocked twin where one
    exists or can be made, then the nodes that read plain tensors are rewired."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        from onnx import numpy_helper

        self.graph = graph
        self.inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.constants = {
            n.output[0]: n.attribute[0].t for n in graph.node if n.op_type == "Constant"
        }
        self.twin: dict[str, str] = {}
        """plain tensor → its blocked twin"""
        self.channels: dict[str, int] = {}
        """plain tensor → its channels (before the block padding)"""
        self.made: set[str] = set()
        """plain tensors whose producer now also writes the blocked twin"""
        self.extent: dict[str, str] = {}
        """tensor → the tensor whose spatial size it has, as far as the graph says: two
        inputs of one extent meet element by element, not by broadcasting (a speaker's
        [N, C, 1, 1] against [N, C, 1, T] would read the blocked layout wrong)"""

    def scalar(self, name: str) -> bool:
        if name in self.inits:
            return bool(self.inits[name].size == 1)
        t = self.constants.get(name)
        return t is not None and int(np.prod(t.dims)) == 1

    def twins(self) -> list[onnx.NodeProto]:
        from onnx import helper

        nodes: list[onnx.NodeProto] = []
        for n in self.graph.node:
            nodes.append(n)
            self._follow_extent(n)
            plain_layout = all(a.i == 0 for a in n.attribute if a.name == "channels_last")
            if n.domain == NCHWC and n.op_type == "ReorderOutput" and plain_layout:
                self.twin[n.output[0]] = n.input[0]
                self.channels[n.output[0]] = next(a.i for a in n.attribute if a.name == "channels")
            elif n.domain == NCHWC and n.op_type == "ReorderInput" and plain_layout:
                self.twin.setdefault(n.input[0], n.output[0])
            elif n.domain == "" and n.op_type == "ConvTranspose" and self._four_d(n):
                group = next((a.i for a in n.attribute if a.name == "group"), 1)
                blocked = f"{n.output[0]}{BLOCKED}"
                nodes.append(
                    helper.make_node(
                        "ReorderInput", [n.output[0]], [blocked], domain=NCHWC, channels_last=0
                    )
                )
                self.twin[n.output[0]] = blocked
                self.channels[n.output[0]] = int(self.inits[n.input[1]].shape[1]) * group
            elif n.domain == "" and n.op_type in LAYOUT_FREE and (made := self._elementwise(n)):
                nodes.append(made)
        return nodes

    def _follow_extent(self, n: onnx.NodeProto) -> None:
        extent = n.output[0]
        if n.op_type in ("ReorderInput", "ReorderOutput") or (
            n.op_type == "Conv" and _keeps_length(n)
        ):
            extent = self.extent.get(n.input[0], n.input[0])
        elif n.domain == "" and n.op_type in LAYOUT_FREE:
            extents = {self.extent.get(i, i) for i in n.input if not self.scalar(i)}
            extent = extents.pop() if len(extents) == 1 else extent
        self.extent[n.output[0]] = extent

    def _four_d(self, n: onnx.NodeProto) -> bool:
        weight = self.inits.get(n.input[1]) if len(n.input) > 1 else None
        return weight is not None and weight.ndim == 4

    def _elementwise(self, n: onnx.NodeProto) -> onnx.NodeProto | None:
        from onnx import helper

        tensors = [i for i in n.input if not self.scalar(i)]
        if not tensors or not all(i in self.twin for i in tensors):
            return None
        channels = {self.channels.get(i, 0) for i in tensors}
        extents = {self.extent.get(i, i) for i in tensors}
        if len(channels) != 1 or 0 in channels or len(extents) != 1:
            return None  # unknown, or mixed (a broadcast): leave it plain
        blocked = f"{n.output[0]}{BLOCKED}"
        made = helper.make_node(
            n.op_type, [self.twin.get(i, i) for i in n.input], [blocked], name=blocked
        )
        made.attribute.extend(n.attribute)
        self.twin[n.output[0]] = blocked
        self.channels[n.output[0]] = channels.pop()
        self.made.add(n.output[0])
        return made

    def rewire(self, nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
        """A ``ReorderInput`` of a tensor with an earlier twin goes; a node that needs a
        plain tensor an element-wise twin now makes (or the graph's output) reads it
        through one ``ReorderOutput``."""
        dropped = {
            n.output[0]: self.twin[n.input[0]]
            for n in nodes
            if n.domain == NCHWC
            and n.op_type == "ReorderInput"
            and self.twin.get(n.input[0], n.output[0]) != n.output[0]
        }
        back: dict[str, str] = {}
        to_output = {self.twin[o]: o for o in outputs & self.made}
        out: list[onnx.NodeProto] = []
        for n in nodes:
            if n.output[0] in dropped or n.output[0] in to_output.values():
                continue
            for k, name in enumerate(n.input):
                if name in dropped:
                    n.input[k] = dropped[name]
                elif name in self.made and not self._twinned(n):
                    if name not in back:
                        back[name] = f"{name}__plain"
                        out.append(self._plain(name, back[name]))
                    n.input[k] = back[name]
            out.append(n)
            if n.output[0] in to_output:
                out.append(self._plain(to_output[n.output[0]], to_output[n.output[0]]))
        return out

    def _plain(self, name: str, to: str) -> onnx.NodeProto:
        """The node writing ``name``'s blocked twin out to ``to`` in the plain layout."""
        from onnx import helper

        return helper.make_node(
            "ReorderOutput",
            [self.twin[name]],
            [to],
            domain=NCHWC,
            channels_last=0,
            channels=self.channels[name],
        )

    def _twinned(self, n: onnx.NodeProto) -> bool:
        return n.domain == NCHWC or n.output[0] in self.made


def _keeps_length(conv: onnx.NodeProto) -> bool:
    """Whether a convolution's output has its input's spatial size: stride 1, and pads
    that make up for what its (dilated) kernel takes."""
    from onnx import helper

    at = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    kernel = list(at.get("kernel_shape", []))
    if not kernel or at.get("auto_pad", b"NOTSET") != b"NOTSET":
        return False
    dilations = list(at.get("dilations", [1] * len(kernel)))
    pads = list(at.get("pads", [0] * 2 * len(kernel)))
    return all(s == 1 for s in at.get("strides", [1] * len(kernel))) and all(
        pads[i] + pads[i + len(kernel)] == d * (k - 1)
        for i, (k, d) in enumerate(zip(kernel, dilations, strict=True))
    )


def _live(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` less those whose outputs nothing reads (repeated: a chain dies whole)."""
    while True:
        read = outputs | {name for n in nodes for name in n.input}
        alive = [n for n in nodes if any(o in read for o in n.output)]
        if len(alive) == len(nodes):
            return alive
        nodes = alive


def keep_blocked(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` (a graph ONNX Runtime optimised with its NCHWc pass) with its
    element-wise operators on blocked tensors; and the layout conversions it saves per run.
    ValueError when it saves none (no NCHWc convolutions, or none next to such operators)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    before = sum(n.domain == NCHWC and n.op_type.startswith("Reorder") for n in graph.node)
    outputs = {o.name for o in graph.output}
    rewrite = _Rewrite(graph)
    nodes = _live(rewrite.rewire(rewrite.twins(), outputs), outputs)
    after = sum(n.domain == NCHWC and n.op_type.startswith("Reorder") for n in nodes)
    if after >= before:
        raise ValueError("no layout conversion to save")
    _replace_nodes(graph, nodes)
    del graph.value_info[:]  # the optimiser's shapes named tensors that may be gone
    return out, before - after


def fold_sums(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` (:func:`keep_blocked`'s) with each ``Add`` of a blocked
    convolution's output and another blocked tensor done by that convolution: its ``Sum``
    input, added to each output element as it is written.  And how many were folded.

    Only where nothing else reads the convolution's output, the convolution applies no
    activation of its own (it would come after the sum), and both terms are 4-D tensors
    (a scalar would broadcast; :func:`keep_blocked` blocks an ``Add`` only when its
    tensors share their extent).  The folded convolution takes the ``Add``'s place in the
    order, after both of its terms are made."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = list(out.graph.node)
    readers = Counter(name for n in nodes for name in n.input)
    producer = {o: n for n in nodes for o in n.output}
    outputs = {o.name for o in out.graph.output}
    placed: dict[int, onnx.NodeProto] = {}
    """Add (by id) → the convolution that does it now"""
    for n in nodes:
        if n.domain != NCHWC and n.op_type == "Add" and len(n.input) == 2:
            conv = _summable(n, producer, readers, outputs)
            if conv is not None:
                other = n.input[1] if conv.output[0] == n.input[0] else n.input[0]
                conv.input.extend([""] * (3 - len(conv.input)) + [other])
                conv.output[0] = n.output[0]
                placed[id(n)] = conv
    moved = {id(c) for c in placed.values()}
    order = [placed.get(id(n), n) for n in nodes if id(n) not in moved or id(n) in placed]
    _replace_nodes(out.graph, order)
    return out, len(placed)


def _summable(
    add: onnx.NodeProto,
    producer: dict[str, onnx.NodeProto],
    readers: Counter[str],
    outputs: set[str],
) -> onnx.NodeProto | None:
    """The blocked convolution that can do ``add`` as its ``Sum``, if any (see fold_sums)."""
    if not add.output[0].endswith(BLOCKED) or add.input[0] == add.input[1]:
        return None  # a plain Add, or x + x
    if not all(_is_blocked(i, producer) for i in add.input):
        return None  # a scalar term
    for name in add.input:
        conv = producer[name]
        if (
            conv.domain == NCHWC
            and conv.op_type == "Conv"
            and len(conv.input) <= 3
            and not any(a.name == "activation" for a in conv.attribute)
            and readers[name] == 1
            and name not in outputs
        ):
            return conv
    return None


def _is_blocked(name: str, producer: dict[str, onnx.NodeProto]) -> bool:
    """Whether a node writes ``name`` in the blocked layout: an NCHWc operator other than
    the one that converts out of it, or a twin :func:`keep_blocked` made."""
    node = producer.get(name)
    if node is None:
        return False
    return name.endswith(BLOCKED) or (node.domain == NCHWC and node.op_type != "ReorderOutput")


def _replace_nodes(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    import onnx

    kept = [onnx.NodeProto() for _ in nodes]
    for new, old in zip(kept, nodes, strict=True):
        new.CopyFrom(old)  # copied first: clearing the graph's nodes would clear ``nodes``
    del graph.node[:]
    graph.node.extend(kept)
