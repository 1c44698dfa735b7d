"""Parts that leave out the context they were given once no later layer needs it.

A window of latent is decoded with ``context`` frames on each side (see
``appliance.model.engine.windows``) because HiFi-GAN's first layers reach that far; the
samples of those frames are thrown away.  But after each upsampling stage the layers
still to come reach much less far, in frames: running every stage over all of the
context is most of what a first chunk's decode pays for it (an 18-frame window, 8
wanted + 10 of right context, 3.6 ms on two threads; 2.5 ms when each stage keeps 1
frame of it, samples unchanged).  The flow is the same: each of its coupling layers
reaches 8 frames, so after each the rest needs 8 fewer of its 32.

:func:`add_margin_crops` (decoder) and :func:`add_flow_margin_crops` (flow) write a
``Slice`` on the time axis at each such point, fed by two graph inputs (start and
end), and record in the model's metadata where the crops are and how many frames of
context each keeps (:class:`MarginCrops`).  The backend computes those inputs from the
margins of each window (:meth:`MarginCrops.feeds`): a first chunk has no left context,
a clause's last window less on its right.  How many frames the decoder keeps is found
per voice at cut time, against the fused model (``appliance.model.voices``); the flow's are
its layers' reach.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from appliance.model import graphs

if TYPE_CHECKING:
    import onnx

METADATA_KEY = "ttsd.margin_crops"
_AXES = "__margin_axes"


@dataclass(frozen=True)
class MarginCrops:
    """Where a part crops its margins: per crop, samples per frame there and frames kept."""

    points: tuple[tuple[int, int], ...]
    """(samples per latent frame at the crop, frames of context kept on each side)."""

    @staticmethod
    def start_name(i: int) -> str:
        return f"margin_crop{i}_start"

    @staticmethod
    def end_name(i: int) -> str:
        return f"margin_crop{i}_end"

    def to_metadata(self) -> str:
        return ",".join(f"{scale}:{keep}" for scale, keep in self.points)

    @classmethod
    def from_metadata(cls, text: str) -> MarginCrops:
        points = []
        for part in text.split(","):
            scale, keep = (int(v) for v in part.split(":"))
            if scale < 1 or keep < 0:
                raise ValueError(f"bad margin crop {part!r}")
            points.append((scale, keep))
        return cls(tuple(points))

    def feeds(self, frames: int, left: int, right: int) -> tuple[dict[str, np.ndarray], int, int]:
        """The crop inputs for a window of ``frames`` whose first ``left`` and last
        ``right`` frames are not wanted back, and the frames still to trim from each end of
        the output (what the last crop kept)."""
        feeds: dict[str, np.ndarray] = {}
        length = frames  # the tensor's length at the next crop, in latent frames
        for i, (scale, keep) in enumerate(self.points):
            new_left, new_right = min(left, keep), min(right, keep)
            start = (left - new_left) * scale
            end = (length - (right - new_right)) * scale
            feeds[self.start_name(i)] = np.array([start], dtype=np.int64)
            feeds[self.end_name(i)] = np.array([end], dtype=np.int64)
            length -= (left - new_left) + (right - new_right)
            left, right = new_left, new_right
        return feeds, left, right


def read_crops(metadata: dict[str, str]) -> MarginCrops | None:
    """The crops a part's metadata describes (None: a part without them)."""
    text = metadata.get(METADATA_KEY)
    return None if text is None else MarginCrops.from_metadata(text)


def _last(values: list[int]) -> int:
    return values[-1] if values else 1


def add_margin_crops(model: onnx.ModelProto, keep: int) -> onnx.ModelProto:
    """A copy of ``model`` (a HiFi-GAN decoder, 1-D or lifted to 2-D: time is the last
    axis either way) that keeps ``keep`` frames of context after each upsampling stage.

    Crops go on the input of every ``ConvTranspose`` but the first and on the input of
    the last ``Conv`` (the post-convolution); :class:`ValueError` for a graph without
    that shape."""
    g = model.graph
    ups = [i for i, n in enumerate(g.node) if n.op_type == "ConvTranspose"]
    convs = [i for i, n in enumerate(g.node) if n.op_type == "Conv"]
    if not ups or not convs or convs[-1] < ups[-1]:
        raise ValueError("not a decoder that upsamples and ends with a convolution")
    scale = 1
    points: list[tuple[str, int, int]] = []  # (tensor, samples per frame there, keep)
    for i in ups:
        strides = next((list(a.ints) for a in g.node[i].attribute if a.name == "strides"), [])
        if i != ups[0]:
            points.append((g.node[i].input[0], scale, keep))
        scale *= _last(strides)
    points.append((g.node[convs[-1]].input[0], scale, keep))
    return _with_crops(model, points, None, "decoder")


def add_flow_margin_crops(model: onnx.ModelProto, mask: str) -> onnx.ModelProto:
    """A copy of ``model`` (VITS's flow: coupling layers, each ending in a ``Concat`` of
    its two halves) cropped after each layer to what the layers after it reach, so a
    window's samples are exactly the whole window's.  ``mask`` (the frame mask every
    layer multiplies by) is cropped alike.  :class:`ValueError` for another shape."""
    g = model.graph
    # A layer ends by joining its halves on the channel axis (not a Concat of a shape).
    ends = [
        i
        for i, n in enumerate(g.node)
        if n.op_type == "Concat" and any(a.name == "axis" and a.i == 1 for a in n.attribute)
    ]
    if len(ends) < 2:
        raise ValueError("not a flow of coupling layers")
    points: list[tuple[str, int, int]] = []
    for i in ends[:-1]:  # what the last layer reaches is trimmed by the caller
        rest = g.node[i + 1 : ends[-1] + 1]
        reach = sum(conv_reach(n) for n in rest if n.op_type == "Conv")
        points.append((g.node[i].output[0], 1, reach))
    return _with_crops(model, points, mask, "flow")


def conv_reach(
    node: onnx.NodeProto, initializers: dict[str, onnx.TensorProto] | None = None
) -> int:
    """Frames a ``Conv`` looks at on each side of its time axis (the last), (kernel - 1) *
    dilation / 2: its kernel from the attributes, else from its weight's shape."""
    attrs = {a.name: [int(v) for v in a.ints] for a in node.attribute}
    kernel = attrs.get("kernel_shape") or []
    if not kernel and initializers and len(node.input) > 1 and node.input[1] in initializers:
        kernel = [int(d) for d in initializers[node.input[1]].dims[2:]]
    dilation = attrs.get("dilations") or [1]
    if not kernel:
        raise ValueError(f"Conv {node.name or node.output[0]} has no kernel shape")
    return ((kernel[-1] - 1) * dilation[-1] + 1) // 2


def _with_crops(
    model: onnx.ModelProto, points: list[tuple[str, int, int]], follow: str | None, what: str
) -> onnx.ModelProto:
    """``model`` with a ``Slice`` on the time axis of each of ``points`` (tensor, samples
    per frame there, frames kept), in graph order, fed by two graph inputs each and
    described in the metadata.  ``follow``: a graph input cropped alike at each point for
    the nodes after it."""
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    if any(n.domain not in ("", "ai.onnx") for n in g.node):
        raise ValueError(f"the {what} has operators outside the ONNX domain")
    g.initializer.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), _AXES))
    crops = MarginCrops(tuple((scale, keep) for _, scale, keep in points))
    producer = graphs.producer_positions(g)
    inserted: dict[int, list[onnx.NodeProto]] = {}  # after the node that makes the tensor
    followed = follow
    for k, (src, _, _) in enumerate(points):
        if src not in producer:
            raise ValueError(f"{src}: a crop point that is not computed by the graph")
        at = producer[src]
        if inserted and at <= max(inserted):
            raise ValueError(f"{src}: crop points out of graph order")
        dst = f"{src}__margins"
        start, end = crops.start_name(k), crops.end_name(k)
        for name in (start, end):
            g.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.INT64, [1]))
        slices = [helper.make_node("Slice", [src, start, end, _AXES], [dst], name=f"{dst}_slice")]
        renames = {src: dst}
        if followed is not None:
            cropped = f"{follow}__margins{k}"
            slices.append(
                helper.make_node(
                    "Slice", [followed, start, end, _AXES], [cropped], name=f"{cropped}_slice"
                )
            )
            renames[followed] = cropped
            followed = cropped
        for n in g.node[at + 1 :]:
            for j, name in enumerate(n.input):
                if name in renames:
                    n.input[j] = renames[name]
        inserted[at] = slices
    nodes = []
    for i, n in enumerate(g.node):
        nodes.append(n)
        nodes.extend(inserted.get(i, ()))
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]  # lengths after a crop are not what shape inference saw
    entry = out.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, crops.to_metadata()
    try:
        onnx.checker.check_model(out)
    except onnx.checker.ValidationError as exc:
        with contextlib.suppress(onnx.checker.ValidationError):
            # The extractor leaves some cut-out parts (the flow) with shapeless inputs,
            # which the checker refuses: only what the crops broke counts.
            onnx.checker.check_model(model)
            raise ValueError(f"the cropped {what} is not valid ONNX: {exc}") from exc
    return out
