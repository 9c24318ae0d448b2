"""The package's layers, read from its imports (every import, those inside
functions included): the HTTP/1.1 and HTTP/2 sides never import each other,
nothing below the process layer imports it, the shared leaves import no
subpackage, and no module imports itself through others."""

from __future__ import annotations

import ast
import pathlib

import h2ping

PACKAGE = pathlib.Path(h2ping.__file__).parent
#: Modules that face users and may import any part: the package itself,
#: ``python -m h2ping``, the demo and the pytest plugin.
FACES = {"h2ping", "h2ping.__main__", "h2ping.demo", "h2ping.pytest_plugin"}
SIDES = ("h2ping.http1", "h2ping.http2")
PROCESS = "h2ping.process"
PARTS = ("h2ping.http1", "h2ping.http2", "h2ping.forward", PROCESS, "h2ping.testing")


def module_name(path: pathlib.Path) -> str:
    parts = ["h2ping", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports(name: str) -> set[str]:
    """The package's modules that ``name`` imports, wherever in it the import stands."""
    path = MODULES[name]
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                source = ".".join([*base[: len(base) - node.level + 1], node.module or ""])
            else:
                source = node.module or ""
            source = source.rstrip(".")
            # ``from package import module`` names the module; else the source itself.
            targets = [f"{source}.{alias.name}" for alias in node.names]
            targets = [t if t in MODULES else source for t in targets]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


GRAPH = {name: imports(name) for name in MODULES}


def part_of(name: str) -> str | None:
    return next((part for part in PARTS if name == part or name.startswith(part + ".")), None)


def test_every_module_is_read() -> None:
    assert {"h2ping.http1.listener", "h2ping.http2.upstream", "h2ping.forward.exchange"} <= set(
        GRAPH
    )
    assert GRAPH["h2ping.forward.exchange"] >= {"h2ping.http1.messages", "h2ping.http2.streams"}


def test_the_two_sides_never_import_each_other() -> None:
    crossing = [
        (name, target)
        for name, targets in GRAPH.items()
        for target in targets
        if part_of(name) in SIDES and part_of(target) in SIDES and part_of(name) != part_of(target)
    ]
    assert not crossing


def test_nothing_below_the_process_layer_imports_it() -> None:
    upward = [
        (name, target)
        for name, targets in GRAPH.items()
        for target in targets
        if part_of(target) == PROCESS and part_of(name) != PROCESS and name not in FACES
    ]
    assert not upward


def test_the_sides_and_the_shared_leaves_import_nothing_above_them() -> None:
    allowed = {
        None: set(),  # the shared leaves (config, errors, stats, ...): only each other
        "h2ping.http1": {"h2ping.http1"},
        "h2ping.http2": {"h2ping.http2"},
    }
    upward = [
        (name, target)
        for name, targets in GRAPH.items()
        if name not in FACES and part_of(name) in allowed
        for target in targets
        if part_of(target) is not None and part_of(target) not in allowed[part_of(name)]
    ]
    assert not upward


def test_no_import_cycle() -> None:
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for target in sorted(GRAPH[name]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)
    assert not cycles
