"""Band a Piper encoder's relative-position attention: the same sums, without the zeros.

VITS's text encoder adds learned relative-position terms to each attention layer, but only
within a window of ``w`` positions (``window_size`` 4: ``emb_rel_k`` and ``emb_rel_v`` are
``[1, 2w + 1, d]``).  The exporter writes them as PyTorch computes them: the embeddings
padded with zeros to every offset of the sentence (``2T - 1``), a ``[T, d] × [d, 2T - 1]``
product for the keys' logits, and pads and reshapes of ``[T, 2T]`` tensors to move them
between relative and absolute positions, and back for the values.  At 555 phonemes the
prior took 92 ms on two threads, and 73 ms with its attention banded (docs/speed.md).

Rewritten, each layer computes the ``2w + 1`` offsets that are not zero, ``[T, d] × [d,
2w + 1]`` and ``[T, 2w + 1] × [2w + 1, d]``, and shifts them between relative and absolute
positions with the same skew (pad, reshape, slice) on tensors about half as wide.  Every
term that was not zero is the same product of the same numbers (summed in another order
by the matrix kernels: the cut keeps the rewrite only when the outputs stay within its
tolerance, :func:`appliance.model.voices.cut._optimised`).  The rewrite needs shared
embeddings (``heads_share``: their first dimension 1) and the graph as the exporter wrote
it; anything else is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.model import graphs

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import onnx

    FloatArray = npt.NDArray[np.float32]

_SKEW_OPS = frozenset({"Pad", "Reshape", "Slice"})
"""What the exporter's moves between relative and absolute positions are made of."""


@dataclass(frozen=True)
class _Layer:
    """One attention layer's relative terms, as the exporter wrote them."""

    query: str  # the scaled query, [B, H, T, d]
    logits_out: str  # its relative logits in absolute positions, [B, H, T, T]
    probs: str  # the softmax, [B, H, T, T]
    values_out: str  # the relative values' product, [B, H, T, d]
    emb_k: str
    emb_v: str


class _Graph:
    """Who produces and who consumes each tensor of one graph (:mod:`appliance.model.graphs`),
    and the exporter's paths between a relative term and its attention layer."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.producer = graphs.producers(graph)
        self.consumers = graphs.consumers(graph)

    def readers(self, name: str) -> list[onnx.NodeProto]:
        """The nodes that read ``name``'s values (not only its shape)."""
        return [n for n in self.consumers.get(name, []) if n.op_type != "Shape"]

    def from_embedding(self, name: str, inits: set[str]) -> str | None:
        """The relative embedding a product's operand was padded from, if it was."""
        for _ in range(8):
            node = self.producer.get(name)
            if node is None:
                return None
            if node.op_type == "Pad" and node.input[0] in inits:
                return str(node.input[0])
            if node.op_type not in ("Slice", "Unsqueeze", "Transpose") or not node.input:
                return None
            name = node.input[0]
        return None

    def skew_forward(self, name: str) -> str | None:
        """The end of the pads, reshapes and slices after ``name``, if one ``Add`` takes it."""
        for _ in range(8):
            after = self.readers(name)
            if len(after) != 1:
                return None
            if after[0].op_type == "Add":
                return name
            if after[0].op_type not in _SKEW_OPS or after[0].input[0] != name:
                return None
            name = after[0].output[0]
        return None

    def skew_back(self, name: str) -> str | None:
        """The softmax the pads, reshapes and slices before ``name`` start from, if one does."""
        for _ in range(8):
            node = self.producer.get(name)
            if node is None:
                return None
            if node.op_type == "Softmax":
                return name
            if node.op_type not in _SKEW_OPS:
                return None
            name = node.input[0]
        return None


def _layers(graph: onnx.GraphProto, shared: set[str]) -> list[_Layer]:
    g = _Graph(graph)
    keys: dict[str, tuple[str, str]] = {}  # query → (its logits' last skew, emb_k)
    values: dict[str, tuple[str, str]] = {}  # softmax → (values' product, emb_v)
    for n in graph.node:
        if n.op_type != "MatMul":
            continue
        emb = g.from_embedding(n.input[1], shared)
        if emb is None:
            continue
        if emb.endswith("emb_rel_k") and (end := g.skew_forward(n.output[0])) is not None:
            keys[n.input[0]] = (end, emb)
        elif emb.endswith("emb_rel_v") and (probs := g.skew_back(n.input[0])) is not None:
            values[probs] = (n.output[0], emb)
    layers = []
    for query, (end, emb_k) in keys.items():
        add = g.readers(end)[0]
        scores = add.input[1] if add.input[0] == end else add.input[0]
        softmax = _softmax_of(g, scores)
        if softmax is not None and softmax in values:
            out, emb_v = values[softmax]
            layers.append(_Layer(query, end, softmax, out, emb_k, emb_v))
    return layers


def _softmax_of(g: _Graph, scores: str) -> str | None:
    """The softmax two or three steps after the scores (their sum, the mask, the softmax)."""
    name = scores
    for _ in range(4):
        after = g.readers(name)
        if len(after) != 1:
            return None
        if after[0].op_type == "Softmax":
            return str(after[0].output[0])
        name = after[0].output[0]
    return None


def band_relative_attention(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` with each relative-position attention banded, and how many; the
    copy is ``model`` itself, unchanged, when there is none."""
    import onnx
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    shared = {
        k
        for k, a in inits.items()
        if k.endswith(("emb_rel_k", "emb_rel_v")) and a.ndim == 3 and a.shape[0] == 1
    }
    if any(a.g.node or a.graphs for n in model.graph.node for a in n.attribute):
        return model, 0  # a subgraph may read outer names: not a graph the exporter wrote here
    layers = _layers(model.graph, shared)
    if not layers:
        return model, 0
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    replaced = {x for layer in layers for x in (layer.logits_out, layer.values_out)}
    producers = [n for n in graph.node if not set(n.output) & replaced]
    del graph.node[:]
    graph.node.extend(producers)
    for i, layer in enumerate(layers):
        _Banding(graph, f"band{i}", inits).add(layer)
    graphs.topological_sort(graph, "banded graph")
    graphs.prune(graph)  # the exporter's zero padding
    return out, len(layers)


class _Banding:
    """The nodes of one layer's banded terms, written into ``graph``."""

    def __init__(self, graph: onnx.GraphProto, prefix: str, inits: Mapping[str, object]) -> None:
        self._graph = graph
        self._prefix = prefix
        self._inits = inits

    def _name(self, what: str) -> str:
        return f"/{self._prefix}/{what}"

    def _const(self, what: str, value: object) -> str:
        import numpy as np
        from onnx import numpy_helper

        name = self._name(what)
        self._graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def _node(self, op: str, inputs: list[str], what: str, out: str | None = None) -> str:
        from onnx import helper

        name = out or self._name(what)
        node = helper.make_node(op, inputs, [name], name=self._name(what))
        if op == "Concat":
            node.attribute.append(helper.make_attribute("axis", 0))
        self._graph.node.append(node)
        return name

    def add(self, layer: _Layer) -> None:
        import numpy as np

        emb_k = np.asarray(self._inits[layer.emb_k], np.float32)[0]  # [2w + 1, d]
        emb_v = np.asarray(self._inits[layer.emb_v], np.float32)[0]
        t = self._length(layer.query)
        # Shared by the keys' and the values' skews.
        self._const("flat", np.array([0, 0, -1]))
        self._const("zero", [0])
        self._const("ax3", [3])
        rows = self._node(
            "Concat", [self._const("zz", np.array([0, 0])), t, self._const("m1", [-1])], "rows"
        )
        self._keys(layer, t, rows, emb_k)
        self._values(layer, t, rows, emb_v)

    def _keys(self, layer: _Layer, t: str, rows: str, emb_k: FloatArray) -> None:
        """[T, 2w + 1] logits, skewed into absolute positions (row i moved right by i)."""
        import numpy as np

        w = emb_k.shape[0] // 2
        band = self._node("MatMul", [layer.query, self._const("emb_k_t", emb_k.T.copy())], "k")
        pads = self._node("Concat", [self._const("zeros7", np.zeros(7, np.int64)), t], "kpads")
        wide = self._node("Pad", [band, pads], "kpad")  # [B, H, T, T + 2w + 1]
        flat = self._node("Reshape", [wide, self._name("flat")], "kflat")
        keep = self._node(
            "Mul", [t, self._node("Add", [t, self._const("w2", [2 * w])], "kw")], "kn"
        )
        cut = self._node("Slice", [flat, self._name("zero"), keep, self._const("ax2", [2])], "kcut")
        square = self._node("Reshape", [cut, rows], "ksq")  # [B, H, T, T + 2w]
        end = self._node("Add", [t, self._const("w", [w])], "kend")
        self._node(
            "Slice",
            [square, self._const("w0", [w]), end, self._name("ax3")],
            "kabs",
            layer.logits_out,
        )

    def _values(self, layer: _Layer, t: str, rows: str, emb_v: FloatArray) -> None:
        """The softmax's 2w + 1 diagonals about the main one (row i moved left by i), times
        the values' embeddings."""
        import numpy as np

        width = emb_v.shape[0]
        w = width // 2
        vpads = self._const("vpads", np.array([0, 0, 0, w, 0, 0, 0, w + 1]))
        padded = self._node("Pad", [layer.probs, vpads], "vpad")  # [B, H, T, T + 2w + 1]
        vflat = self._node("Reshape", [padded, self._name("flat")], "vflat")
        more = self._node("Concat", [self._const("zeros5", np.zeros(5, np.int64)), t], "vpads2")
        longer = self._node("Pad", [vflat, more], "vlong")  # T more: T rows of T + 2w + 2
        skewed = self._node("Reshape", [longer, rows], "vsq")
        diag = self._node(
            "Slice",
            [skewed, self._name("zero"), self._const("width", [width]), self._name("ax3")],
            "vband",
        )
        self._node("MatMul", [diag, self._const("emb_v", emb_v)], "v", layer.values_out)

    def _length(self, query: str) -> str:
        """``T`` as a one-element int64 tensor, read from the query's shape."""
        import numpy as np

        shape = self._node("Shape", [query], "shape")
        return self._node(
            "Slice",
            [shape, self._const("two", np.array([2])), self._const("three", np.array([3]))],
            "t",
        )
