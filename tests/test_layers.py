"""The tree is the architecture: each layer imports only from itself and below, and no
modules import one another in a circle (tests/layers.py holds the map)."""

from __future__ import annotations

from tests.layers import (
    LAYERS,
    REPO,
    cycles,
    generated_block,
    import_graph,
    layer_of,
    render,
    upward,
)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_every_module_is_in_a_layer() -> None:
    for module in import_graph():
        assert 0 <= layer_of(module) < len(LAYERS)


def test_no_import_runs_upward() -> None:
    graph = import_graph()
    assert "appliance.model.engine.windows" in graph["appliance.core.pipeline.encode"]  # it reads
    assert not upward(graph), "imports from a higher layer: " + ", ".join(
        f"{a} → {b}" for a, b in upward(graph)
    )


def test_an_upward_import_would_be_seen() -> None:
    graph = {"appliance.text.frontend": {"appliance.core.service"}, "appliance.core.service": set()}
    assert upward(graph) == [("appliance.text.frontend", "appliance.core.service")]


def test_no_modules_import_one_another_in_a_circle() -> None:
    assert not cycles(import_graph()), f"import cycles: {cycles(import_graph())}"


def test_docs_architecture_is_generated_from_the_code() -> None:
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert generated_block(doc) == render(import_graph()), "run: python -m tests.layers"
