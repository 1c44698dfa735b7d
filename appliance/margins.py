"""A decoder that leaves out the context it was given once no later layer needs it.

A window of latent is decoded with ``context`` frames on each side (see
``appliance.engine.windows``) because HiFi-GAN's first layers reach that far; the
samples of those frames are thrown away.  But after each upsampling stage the layers
still to come reach much less far, in frames: running every stage over all of the
context is most of what a first chunk's decode pays for it (an 18-frame window, 8
wanted + 10 of right context, 4.4 ms on two threads; 3.0 ms when each stage keeps 2
frames of it, samples unchanged).

:func:`add_margin_crops` writes a ``Slice`` on the time axis before each upsampling
stage after the first, and before the last convolution, each fed by two graph inputs
(start and end), and records in the model's metadata where the crops are and how many
frames of context each keeps (:class:`MarginCrops`).  The backend computes those
inputs from the margins of each window (:meth:`MarginCrops.feeds`): a first chunk has
no left context, a clause's last window less on its right.  How many frames are kept
is found per voice at cut time, against the fused model (``appliance.voices``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

METADATA_KEY = "ttsd.margin_crops"
_AXES = "__margin_axes"


@dataclass(frozen=True)
class MarginCrops:
    """Where a decoder crops its margins: per crop, samples per frame there and frames kept."""

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
        if not points:
            raise ValueError("no margin crops")
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
    """The crops a decoder's metadata describes (None: a decoder without them)."""
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
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    ups = [i for i, n in enumerate(g.node) if n.op_type == "ConvTranspose"]
    convs = [i for i, n in enumerate(g.node) if n.op_type == "Conv"]
    if not ups or not convs or convs[-1] < ups[-1]:
        raise ValueError("not a decoder that upsamples and ends with a convolution")
    scale = 1
    points: list[tuple[int, int]] = []  # (node index, samples per frame at its input)
    for i in ups:
        strides = next((list(a.ints) for a in g.node[i].attribute if a.name == "strides"), [])
        if i != ups[0]:
            points.append((i, scale))
        scale *= _last(strides)
    points.append((convs[-1], scale))
    if any(n.domain not in ("", "ai.onnx") for n in g.node):
        raise ValueError("the decoder has operators outside the ONNX domain")

    g.initializer.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), _AXES))
    crops = MarginCrops(tuple((s, keep) for _, s in points))
    producer = {name: i for i, n in enumerate(g.node) for name in n.output}
    inserted: dict[int, onnx.NodeProto] = {}  # after the node that makes the cropped tensor
    for k, (i, _) in enumerate(points):
        src = g.node[i].input[0]
        if src not in producer:
            raise ValueError(f"{g.node[i].name}: its input is not computed by the graph")
        dst = f"{src}__margins"
        start, end = crops.start_name(k), crops.end_name(k)
        for name in (start, end):
            g.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.INT64, [1]))
        for n in g.node:
            for j, name in enumerate(n.input):
                if name == src:
                    n.input[j] = dst
        inserted[producer[src]] = helper.make_node(
            "Slice", [src, start, end, _AXES], [dst], name=f"{src}__margin_slice"
        )
    nodes = []
    for i, n in enumerate(g.node):
        nodes.append(n)
        if i in inserted:
            nodes.append(inserted[i])
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]  # lengths after a crop are not what shape inference saw
    entry = out.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, crops.to_metadata()
    try:
        onnx.checker.check_model(out)
    except onnx.checker.ValidationError as exc:
        raise ValueError(f"the cropped decoder is not valid ONNX: {exc}") from exc
    return out
