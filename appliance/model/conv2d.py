"""1-D convolutions run as 2-D ones of height one, for ONNX Runtime's blocked kernels.

ONNX Runtime runs a 1-D ``Conv`` as im2col + GEMM; its blocked (NCHWc)
convolution kernels, which read the input in place, are only used for 2-D ones.
A ``[N, C, T]`` tensor carried as ``[N, C, 1, T]`` (kernels ``[1, K]``) gives the
same sums in another order.  Two rewrites (docs/speed.md has the figures):

* :func:`lift_to_2d`, the whole decoder (HiFi-GAN: convolutions, element-wise
  operators): every tensor lifted, so the blocked layout runs from one
  convolution to the next.  On one thread it costs ~20 % less CPU (148 frames
  69 vs 86 ms), but the blocked kernels do not split a height-one row between
  threads, so the 1-D graph stays the faster one when a listener is waiting and
  a second core is free (18 frames on two threads: 6.9 ms against 7.9).  The
  rewrite knows the operators a Piper decoder is made of and refuses any other
  (:class:`ValueError`): a graph it does not understand keeps running 1-D.
* :func:`wrap_convs`, any graph (the prior, the flow): each ``Conv`` alone, between
  an ``Unsqueeze`` and a ``Squeeze``.  The short command's prior: 15.5 ms
  instead of 17.4 on two threads, with 16 % less CPU; a 50-frame flow window
  8.0 instead of 8.6 ms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "LeakyRelu", "Tanh", "Relu", "Sigmoid"})
"""Operators that work on the lifted tensors unchanged (their constants lifted alike)."""

CONVOLUTIONS = frozenset({"Conv", "ConvTranspose"})

_AXES = "__lift2d_axes"


def lift_to_2d(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` (a 1-D convolutional decoder) with its convolutions made 2-D.

    Every 3-D graph input gets an ``Unsqueeze`` at axis 2; convolution weights, kernel
    shapes, strides, dilations and pads gain a unit first dimension; constants of
    element-wise operators keep their broadcasting by a unit axis before their last.
    A graph output is squeezed back to its original shape: through the ``Unsqueeze``
    the exporter ends the decoder with, or by a ``Squeeze`` of its own.
    """
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {t.name: t for t in g.initializer}
    outputs = {o.name for o in g.output}
    if any(n.domain not in ("", "ai.onnx") for n in g.node):
        raise ValueError("the decoder has operators outside the ONNX domain")
    g.initializer.append(numpy_helper.from_array(np.array([2], dtype=np.int64), _AXES))
    lifted: set[str] = set()
    nodes: list[onnx.NodeProto] = []
    renamed: dict[str, str] = {}

    for inp in g.input:
        if inp.name in inits:
            continue
        if len(inp.type.tensor_type.shape.dim) != 3:
            raise ValueError(f"input {inp.name} is not [N, C, T]")
        new = f"{inp.name}__2d"
        nodes.append(helper.make_node("Unsqueeze", [inp.name, _AXES], [new]))
        renamed[inp.name] = new
        lifted.add(new)

    def lift_constant(name: str) -> None:
        # A unit axis before the last: a weight [O, I, K] becomes [O, I, 1, K], and a
        # constant broadcast against [N, C, T] ([C, 1], [1, C, 1]) still lines up.
        t = inits[name]
        a = numpy_helper.to_array(t)
        if a.ndim >= 2:
            t.CopyFrom(numpy_helper.from_array(np.expand_dims(a, a.ndim - 1), name))

    lifted_consts: set[str] = set()
    for n in g.node:
        for i, name in enumerate(n.input):
            if name in renamed:
                n.input[i] = renamed[name]
        if n.op_type in CONVOLUTIONS:
            if n.input[0] not in lifted or n.input[1] not in inits:
                raise ValueError(f"{n.name}: convolution of a tensor the rewrite did not lift")
            if len(inits[n.input[1]].dims) != 3:
                raise ValueError(f"{n.name}: not a 1-D convolution")
            if n.input[1] in lifted_consts:
                raise ValueError(f"{n.name}: a weight shared with another node")
            lift_constant(n.input[1])
            lifted_consts.add(n.input[1])
            for a in n.attribute:
                if a.name in ("kernel_shape", "strides", "dilations", "output_padding"):
                    values = list(a.ints)
                    del a.ints[:]
                    a.ints.extend([0 if a.name == "output_padding" else 1, *values])
                elif a.name == "pads":
                    begin, end = list(a.ints)
                    del a.ints[:]
                    a.ints.extend([0, begin, 0, end])
                elif a.name == "output_shape":
                    raise ValueError(f"{n.name}: output_shape is not supported")
            lifted.update(n.output)
        elif n.op_type in ELEMENTWISE:
            for name in n.input:
                if name in inits:
                    if name not in lifted_consts:
                        lift_constant(name)
                        lifted_consts.add(name)
                elif name not in lifted:
                    raise ValueError(f"{n.name}: {n.op_type} of a tensor the rewrite did not lift")
            lifted.update(n.output)
        elif n.op_type == "Unsqueeze" and n.output[0] in outputs and n.input[0] in lifted:
            # The exporter's last node: back to 3-D first, then its own Unsqueeze.
            flat = f"{n.input[0]}__1d"
            nodes.append(helper.make_node("Squeeze", [n.input[0], _AXES], [flat]))
            n.input[0] = flat
        else:
            raise ValueError(f"{n.name}: {n.op_type} is not known to the 2-D rewrite")
        nodes.append(n)

    for o in g.output:
        if o.name in lifted:  # produced 4-D: squeeze it back under its own name
            inner = f"{o.name}__2d_out"
            for n in nodes:
                for i, name in enumerate(n.output):
                    if name == o.name:
                        n.output[i] = inner
                for i, name in enumerate(n.input):
                    if name == o.name:
                        n.input[i] = inner
            nodes.append(helper.make_node("Squeeze", [inner, _AXES], [o.name]))
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]  # the shapes inferred for the 1-D graph no longer hold
    try:
        onnx.checker.check_model(out)
    except onnx.checker.ValidationError as exc:
        raise ValueError(f"the rewritten decoder is not valid ONNX: {exc}") from exc
    return out


def wrap_convs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` with each 1-D ``Conv`` computed as a 2-D one, and how many.

    Only convolutions whose weight is an initializer used by convolutions alone are
    wrapped; the rest of the graph is untouched, so any graph can be given.
    """
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {t.name: t for t in g.initializer}
    # A weight read by anything but a convolution's weight input keeps its shape.
    other_uses = {i for n in g.node if n.op_type != "Conv" for i in n.input} | {
        n.input[0] for n in g.node if n.op_type == "Conv"
    }
    nodes: list[onnx.NodeProto] = []
    lifted: set[str] = set()
    count = 0
    for n in g.node:
        weight = n.input[1] if n.op_type == "Conv" and len(n.input) > 1 else ""
        if (
            not weight
            or weight not in inits
            or len(inits[weight].dims) != 3
            or weight in other_uses
            or any(a.name == "auto_pad" for a in n.attribute)
        ):
            nodes.append(n)
            continue
        if weight not in lifted:
            a = numpy_helper.to_array(inits[weight])
            inits[weight].CopyFrom(numpy_helper.from_array(a[:, :, None, :], weight))
            lifted.add(weight)
        for a in n.attribute:
            if a.name in ("kernel_shape", "strides", "dilations"):
                values = list(a.ints)
                del a.ints[:]
                a.ints.extend([1, *values])
            elif a.name == "pads":
                begin, end = list(a.ints)
                del a.ints[:]
                a.ints.extend([0, begin, 0, end])
        x4, y4 = f"{n.input[0]}__2d_{count}", f"{n.output[0]}__2d"
        y = n.output[0]
        nodes.append(helper.make_node("Unsqueeze", [n.input[0], _AXES], [x4]))
        n.input[0], n.output[0] = x4, y4
        nodes.append(n)
        nodes.append(helper.make_node("Squeeze", [y4, _AXES], [y]))
        count += 1
    if count == 0:
        return model, 0
    g.initializer.append(numpy_helper.from_array(np.array([2], dtype=np.int64), _AXES))
    del g.node[:]
    g.node.extend(nodes)
    return out, count
