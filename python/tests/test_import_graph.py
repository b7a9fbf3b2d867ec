"""The import graph of the fa package has no cycle (issue 44): every import between its modules, those inside
functions included (a cycle hidden by a function-level import is still a cycle), read from the sources with ast.
Runs without torch, the library or a GPU."""

import ast

from conftest import PYTHON_DIR

PACKAGE = "fa"


def module_name(path, root) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def resolve(importer: str, is_package: bool, level: int, module) -> str:
    """The absolute name of `from <level dots><module> import ...` in module `importer`."""
    if level == 0:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(path, root, modules) -> set:
    """The package's modules that `path` (under `root`) imports anywhere in its body."""
    name = module_name(path, root)
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            target = resolve(name, is_package, node.level, node.module)
            for alias in node.names:  # `from . import x` imports the module x when there is one
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
    return {m for m in out if m in modules and m != name}


def import_graph(root=PYTHON_DIR, package=PACKAGE) -> dict:
    """module -> the package's modules it imports, for the package folder root/package."""
    paths = sorted((root / package).rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): imports_of(p, root, modules) for p in paths}


def find_cycle(graph: dict):
    """A list of modules forming a cycle (first repeated at the end), or None."""
    state = {}  # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt, path)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def test_graph_is_read():
    graph = import_graph()
    assert "fa.shape_rules" in graph and "fa._torch_common" in graph
    assert "fa._torch_common" in graph["fa._torch_ops"]
    assert "fa._torch_common" in graph["fa._grad_step"] and "fa._torch_common" in graph["fa._mods_op"]
    assert "fa.shape_rules" in graph["fa._tensor_params"]


def test_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle in python/fa: " + " -> ".join(cycle)


def test_finds_a_cycle_hidden_in_a_function(tmp_path):
    """The checker itself: a function-level import closing a circle is found."""
    pkg = tmp_path / PACKAGE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("x = 1\n\ndef f():\n    from . import a\n    return a\n")
    graph = import_graph(tmp_path)
    assert graph["fa.a"] == {"fa.b"} and graph["fa.b"] == {"fa.a"}
    assert find_cycle(graph) in (["fa.a", "fa.b", "fa.a"], ["fa.b", "fa.a", "fa.b"])
