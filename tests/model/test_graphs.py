"""The shared graph walks: maps of who makes and reads each tensor, ancestors and
descendants, pruning and topological order, on small graphs made with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from appliance.model import graphs


def _graph(
    nodes: list[onnx.NodeProto],
    inits: tuple[str, ...] = (),
    inputs: tuple[str, ...] = ("x",),
    outputs: tuple[str, ...] = ("y",),
) -> onnx.GraphProto:
    def info(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1])

    tensors = [numpy_helper.from_array(np.array([1.0], np.float32), n) for n in inits]
    return helper.make_graph(
        nodes, "g", [info(i) for i in inputs], [info(o) for o in outputs], tensors
    )


def _chain() -> onnx.GraphProto:
    """x → a → b → y, with c a dead branch off a (its own constant k2 too) and a
    ``Mul(a, a)`` reading a twice."""
    return _graph(
        [
            helper.make_node("Add", ["x", "k"], ["a"], name="add"),
            helper.make_node("Mul", ["a", "a"], ["b"], name="square"),
            helper.make_node("Sub", ["a", "k2"], ["c"], name="dead"),
            helper.make_node("Relu", ["b"], ["y"], name="relu"),
        ],
        inits=("k", "k2"),
    )


def _names(nodes: list[onnx.NodeProto]) -> list[str]:
    return [n.name for n in nodes]


def test_producers_map_each_output_to_its_node_and_position() -> None:
    g = _chain()
    made = graphs.producers(g)
    assert {t: n.name for t, n in made.items()} == {
        "a": "add",
        "b": "square",
        "c": "dead",
        "y": "relu",
    }
    assert "x" not in made and "k" not in made  # graph inputs and initializers: no node
    assert graphs.producer_positions(g) == {"a": 0, "b": 1, "c": 2, "y": 3}


def test_consumers_list_a_node_once_per_input_naming_the_tensor() -> None:
    read = graphs.consumers(_chain())
    assert _names(read["a"]) == ["square", "square", "dead"]
    assert _names(read["x"]) == ["add"]
    assert _names(read["k2"]) == ["dead"]
    assert "y" not in read  # only the graph output reads it


def test_consumers_keep_omitted_optional_inputs_under_the_empty_name() -> None:
    g = _graph([helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")], inits=("hi",))
    assert _names(graphs.consumers(g)[""]) == ["clip"]


def test_ancestors_are_what_a_tensor_is_computed_from_itself_included() -> None:
    g = _chain()
    made = graphs.producers(g)
    assert graphs.ancestors(made, "y") == {"y", "b", "a", "x", "k"}
    assert graphs.ancestors(made, "c") == {"c", "a", "x", "k", "k2"}
    assert graphs.ancestors(made, "x") == {"x"}


def test_ancestors_skip_omitted_inputs() -> None:
    g = _graph([helper.make_node("Clip", ["x", "", "hi"], ["y"])], inits=("hi",))
    assert graphs.ancestors(graphs.producers(g), "y") == {"y", "x", "hi"}


def test_descendant_nodes_in_graph_order() -> None:
    g = _chain()
    assert _names(graphs.descendant_nodes(g, ["a"])) == ["square", "dead", "relu"]
    assert _names(graphs.descendant_nodes(g, ["b", "k2"])) == ["dead", "relu"]
    assert _names(graphs.descendant_nodes(g, ["k"])) == ["add", "square", "dead", "relu"]
    assert graphs.descendant_nodes(g, ["y"]) == []


def test_prune_keeps_what_the_outputs_need_and_drops_the_rest() -> None:
    g = _chain()
    graphs.prune(g)
    assert _names(list(g.node)) == ["add", "square", "relu"]
    assert [t.name for t in g.initializer] == ["k"]  # k2 fed only the dead branch
    assert [i.name for i in g.input] == ["x"]  # inputs stay, used or not


def test_prune_drops_an_unused_initializer_even_when_it_is_a_graph_input() -> None:
    g = _chain()
    g.input.append(helper.make_tensor_value_info("k2", TensorProto.FLOAT, [1]))
    graphs.prune(g)
    assert [t.name for t in g.initializer] == ["k"]


def test_prune_keeps_an_initializer_the_graph_outputs() -> None:
    g = _graph([helper.make_node("Neg", ["x"], ["y"])], inits=("k",), outputs=("y", "k"))
    graphs.prune(g)
    assert [t.name for t in g.initializer] == ["k"]


def test_prune_initializers_keeps_those_read_or_named_as_graph_inputs_or_outputs() -> None:
    g = _chain()
    for name in ("unread", "also_input", "also_output"):
        g.initializer.append(numpy_helper.from_array(np.array([2.0], np.float32), name))
    g.input.append(helper.make_tensor_value_info("also_input", TensorProto.FLOAT, [1]))
    g.output.append(helper.make_tensor_value_info("also_output", TensorProto.FLOAT, [1]))
    graphs.prune_initializers(g)
    assert _names(list(g.node)) == ["add", "square", "dead", "relu"]  # the dead one too
    assert [t.name for t in g.initializer] == ["k", "k2", "also_input", "also_output"]


def test_topological_sort_orders_a_shuffled_graph() -> None:
    g = _chain()
    add, square, dead, relu = g.node
    shuffled = [square, relu, add, dead]
    del g.node[:]
    g.node.extend(shuffled)
    graphs.topological_sort(g)
    order = _names(list(g.node))
    assert sorted(order) == ["add", "dead", "relu", "square"]
    assert order.index("add") < order.index("square") < order.index("relu")
    assert order.index("add") < order.index("dead")


def test_topological_sort_takes_ready_nodes_in_graph_order_pass_by_pass() -> None:
    g = _chain()
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(reversed(nodes))  # relu, dead, square, add
    graphs.topological_sort(g)
    # Pass 1 takes add; pass 2 dead then square (their order in the graph); pass 3 relu.
    assert _names(list(g.node)) == ["add", "dead", "square", "relu"]


def test_topological_sort_counts_omitted_inputs_as_ready() -> None:
    g = _graph(
        [
            helper.make_node("Neg", ["c"], ["y"], name="neg"),
            helper.make_node("Clip", ["x", "", "hi"], ["c"], name="clip"),
        ],
        inits=("hi",),
    )
    graphs.topological_sort(g)
    assert _names(list(g.node)) == ["clip", "neg"]


def test_topological_sort_refuses_a_missing_input() -> None:
    g = _graph([helper.make_node("Add", ["x", "nowhere"], ["y"])])
    with pytest.raises(ValueError, match="the graph has a cycle or a missing input"):
        graphs.topological_sort(g)


def test_topological_sort_refuses_a_cycle_naming_what_it_sorted() -> None:
    g = _graph(
        [
            helper.make_node("Add", ["x", "b"], ["a"]),
            helper.make_node("Neg", ["a"], ["b"]),
            helper.make_node("Relu", ["b"], ["y"]),
        ]
    )
    with pytest.raises(ValueError, match="the banded graph has a cycle or a missing input"):
        graphs.topological_sort(g, "banded graph")
