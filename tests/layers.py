"""The layers of ``appliance`` and the import graph over them (tests/test_layers.py, and
``python -m tests.layers`` writes the generated part of docs/architecture.md).

A layer may import from itself and the layers below it, never from one above, and no
modules import one another in a circle.  Every import counts, including those under
``TYPE_CHECKING`` and inside functions: a dependency hidden that way is still one.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "appliance"

LAYERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "vocabulary",
        ("appliance", "appliance.errors", "appliance.speech", "appliance.voicetypes"),
        "the words every layer shares: error codes, neutral request and chunk types, voice "
        "and array types",
    ),
    ("ops", ("appliance.ops",), "settings, paths, logging, systemd, metrics, NVML, watchdog"),
    ("text", ("appliance.text",), "client text → clauses with spans; SSML; lexicon; phonemes"),
    ("model", ("appliance.model",), "voices cut and checked; graph rewrites; the engines"),
    ("playback", ("appliance.playback",), "the speaker: one output stream, priorities, fades"),
    ("core", ("appliance.core",), "scheduler, admission, streaming, the runtime, the service"),
    ("doors", ("appliance.doors",), "the door frame; protocol v1, Wyoming, HTTP, agent"),
    ("clients", ("appliance.clients", "appliance.client"), "the v1 library, ttsctl, sd_ttsd"),
    (
        "daemon",
        (
            "appliance.daemon",
            "appliance.keepwarm",
            "appliance.main",
            "appliance.quotawatch",
            "appliance.reload",
            "appliance.stopper",
            "appliance.upkeep",
        ),
        "the daemon's phases and the ttsd CLI",
    ),
)


def module_name(path: Path) -> str:
    parts = ("appliance", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def import_graph() -> dict[str, set[str]]:
    """Module → the package's modules it imports (``from a import b`` counts ``a.b`` when
    that is a module, else ``a``)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name].update(t for t in targets if t in known and t != name)
    return graph


def _member(base: str, name: str, known: dict[str, Path]) -> str:
    """``from base import name``: the module ``base.name`` when there is one, else ``base``."""
    return f"{base}.{name}" if f"{base}.{name}" in known else base


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of the layer that holds ``module`` (the longest prefix)."""
    best, best_len = -1, -1
    for k, (_, prefixes, _) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = k, len(p)
    if best < 0:
        raise KeyError(f"{module} is in no layer")
    return best


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted(
        (m, t) for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m)
    )


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


def _short(module: str) -> str:
    return module.removeprefix("appliance.") or "appliance"


def layer_edges(graph: dict[str, set[str]]) -> list[tuple[int, int]]:
    """Layer → layer edges (which layers a layer's modules import), for the picture."""
    edges = {(layer_of(m), layer_of(t)) for m, ts in graph.items() for t in ts}
    return sorted((a, b) for a, b in edges if a != b)


def render(graph: dict[str, set[str]]) -> str:
    """The generated part of docs/architecture.md: the layers, their modules, and a
    Mermaid picture of which packages import which."""
    lines = ["<!-- generated by `python -m tests.layers`; do not edit by hand -->", ""]
    lines += ["| layer | modules | what lives there |", "|---|---|---|"]
    by_layer: dict[int, list[str]] = {}
    for m in graph:
        by_layer.setdefault(layer_of(m), []).append(m)
    for k, (name, _, what) in reversed(list(enumerate(LAYERS))):
        mods = ", ".join(f"`{_short(m)}`" for m in sorted(by_layer.get(k, [])))
        lines.append(f"| {k} {name} | {mods} | {what} |")
    lines += ["", "```mermaid", "flowchart TD"]
    for a, b in layer_edges(graph):
        lines.append(f"  {LAYERS[a][0]} --> {LAYERS[b][0]}")
    lines += ["```", "<!-- end of generated part -->"]
    return "\n".join(lines) + "\n"


def generated_block(doc: str) -> str:
    start = doc.index("<!-- generated by")
    end = doc.index("<!-- end of generated part -->") + len("<!-- end of generated part -->")
    return doc[start:end] + "\n"


def write(doc_path: Path, graph: dict[str, set[str]]) -> None:
    doc = doc_path.read_text(encoding="utf-8")
    doc_path.write_text(doc.replace(generated_block(doc), render(graph)), encoding="utf-8")


def main(argv: Iterable[str] = ()) -> int:
    write(REPO / "docs" / "architecture.md", import_graph())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
