"""The package's layering: imports between distmm's modules form no cycle, and lower layers never
import higher ones (docs/developer.md, "Layout"). Every import counts: at module level, inside a
function (deferred, to load an optional or heavy dependency on demand) or under
``if TYPE_CHECKING:`` (the package's lazily loaded exports), since a deferred import back is a
cycle all the same, only found later."""

from __future__ import annotations

import ast
from pathlib import Path

import distmm

ROOT = Path(distmm.__file__).parent

# Each layer may import only the layers listed before it (and itself); the longest matching
# prefix places a module.
LAYERS = [
    ("distmm._version", "distmm.runtime.cores", "distmm.runtime.blas_threads",
     "distmm.runtime.intranode", "distmm.runtime.process"),
    ("distmm.errors", "distmm.runtime.extras", "distmm.runtime.watchdog", "distmm.runtime.signals"),
    ("distmm.core", "distmm.kernels.numba_util"),
    ("distmm.io",),
    ("distmm.sim",),
    ("distmm.kernels",),
    ("distmm.algorithms", "distmm.ops"),
    ("distmm.perf", "distmm.api", "distmm.runtime.info"),
    ("distmm.apps", "distmm.torch", "distmm.cli", "distmm.__main__", "distmm"),
]

def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The distmm modules that ``path`` imports anywhere in it: ``from P import x`` counts as
    importing ``P.x`` when that is a module, else ``P``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "distmm" or node.module.startswith("distmm.")):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "distmm")
    return found & modules


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    return {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}


def _layer(module: str) -> int:
    best, depth = None, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = i, len(prefix)
    assert best is not None, f"{module} is in no layer of LAYERS: add it there"
    return best


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_lower_layers_do_not_import_higher_ones():
    graph = _graph()
    # a package's __init__ may re-export what its own modules define
    wrong = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
             for a, targets in sorted(graph.items()) for b in sorted(targets)
             if _layer(b) > _layer(a) and not b.startswith(a + ".")]
    assert not wrong, "\n".join(wrong)
