"""The package's layers, read from its imports (every import, those inside
functions included): the HTTP/1.1 and HTTP/2 sides never import each other,
nothing below the process layer imports it, the shared leaves import no
subpackage, no module imports itself through others, nothing outside the HTTP/2
side imports a module inside its engine, and only the CLI imports the check, to
dispatch to it, while the check imports nothing of the process layer.

Then the rules of ownership, read from the code: one writer for each piece of
state, no reach into another module's private names, no class built on a class of
another package; one direction through an upstream connection: what the peer
says and the stream table never end it, and only the connection moves its state;
and one through a client connection: its request reader hands back values and
calls nothing of the connection's."""

from __future__ import annotations

import ast
import pathlib

import pytest

import h2ping

PACKAGE = pathlib.Path(h2ping.__file__).parent
#: Modules that face users and may import any part: the package itself,
#: ``python -m h2ping``, the demo and the pytest plugin.
FACES = {"h2ping", "h2ping.__main__", "h2ping.demo", "h2ping.pytest_plugin"}
SIDES = ("h2ping.http1", "h2ping.http2")
PROCESS = "h2ping.process"
#: ``h2ping check``: a command beside the proxy, not part of it. It reads its command
#: line with the shared flag parser (a leaf), dials with the HTTP/2 side and builds
#: its request as the exchange does; only the CLI imports it, to dispatch to it.
CHECK = "h2ping.check"
PARTS = ("h2ping.http1", "h2ping.http2", "h2ping.forward", PROCESS, CHECK, "h2ping.testing")


def module_name(path: pathlib.Path) -> str:
    parts = ["h2ping", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports(name: str, source: str | None = None) -> set[str]:
    """The package's modules that ``name`` (or ``source`` in its place) imports,
    wherever in it the import stands."""
    path = MODULES[name]
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    for node in ast.walk(tree):
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


def test_only_the_cli_imports_the_check() -> None:
    importers = {
        name
        for name, targets in GRAPH.items()
        if part_of(name) != CHECK and any(part_of(t) == CHECK for t in targets)
    }
    assert importers == {"h2ping.process.cli"}


def names_taken_from(name: str, part: str, source: str | None = None) -> set[str]:
    """The names module ``name`` (or ``source`` in its place) imports from ``part``
    or its modules: ``from ..check import main`` takes ``main``."""
    path = MODULES[name]
    base = name.split(".")[:-1]
    taken: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            taken.update(a.name for a in node.names if part_of(a.name) == part)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = ".".join([*base[: len(base) - node.level + 1], module]).rstrip(".")
            if module == part or module.startswith(part + "."):
                taken.update(alias.name for alias in node.names)
    return taken


def test_the_cli_imports_the_check_only_to_dispatch_to_it() -> None:
    assert names_taken_from("h2ping.process.cli", CHECK) == {"main"}


def test_the_check_imports_nothing_from_the_process() -> None:
    """The check reads its flags with the shared parser and dials with the HTTP/2
    side's TLS settings: nothing of the process layer, which imports it."""
    taken = {
        (name, target)
        for name, targets in GRAPH.items()
        if part_of(name) == CHECK
        for target in targets
        if part_of(target) == PROCESS
    }
    assert not taken, taken


@pytest.mark.parametrize(
    ("source", "taken"),
    [
        ("from ..check import main\n", {"main"}),
        ("def f():\n    from ..check.probe import probe\n", {"probe"}),
        ("from ..check import command, main\n", {"command", "main"}),
        ("import h2ping.check.command\n", {"h2ping.check.command"}),
        ("from ..flags import parse_command_line\n", set()),
    ],
)
def test_the_dispatch_guard_sees_what_the_cli_takes(source: str, taken: set[str]) -> None:
    assert names_taken_from("h2ping.process.cli", CHECK, source) == taken


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


# ------------------------------------------------------------ the engine's door
#
# The engine (h2ping.http2.engine) is entered through the names its package
# exports; the modules below it are the HTTP/2 side's business alone.

ENGINE = "h2ping.http2.engine"


def engine_modules_imported(name: str, source: str | None = None) -> set[str]:
    """The modules below the engine's package that ``name`` (or ``source`` in its
    place) imports, unless ``name`` is part of the HTTP/2 side."""
    if part_of(name) == "h2ping.http2":
        return set()
    return {target for target in imports(name, source) if target.startswith(ENGINE + ".")}


def test_nothing_outside_http2_imports_a_module_of_the_engine() -> None:
    found = {
        name: sorted(targets) for name in MODULES if (targets := engine_modules_imported(name))
    }
    assert not found


@pytest.mark.parametrize(
    "source",
    [
        "from ..http2.engine.frames import FrameSplitter\n",
        "from ..http2.engine import frames\n",
        "import h2ping.http2.engine.errortext\n",
        "def f():\n    from h2ping.http2.engine.plain import H2Engine\n",
    ],
)
def test_the_engine_guard_sees_an_import_past_the_door(source: str) -> None:
    assert engine_modules_imported("h2ping.check.prober", source)
    assert not engine_modules_imported("h2ping.http2.upstream", source)


def test_the_engine_guard_lets_the_door_through() -> None:
    source = "from ..http2.engine import FrameSplitter, Goaway\nfrom ..http2 import engine\n"
    assert not engine_modules_imported("h2ping.check.prober", source)


# ------------------------------------------------------------------ the seam
#
# Only h2ping.http2.engine reaches past the documented API of h2, hpack and
# hyperframe. Elsewhere: no import of their internal modules, no class built on
# theirs, and no attribute that they keep private (any ``_name`` their sources
# define) or that the engine's manifest lists as undocumented.

SEAM = "h2ping.http2.engine"
LIBRARIES = ("h2", "hpack", "hyperframe")
INTERNAL_MODULES = ("h2.stream", "h2.windows", "h2.frame_buffer", "hpack.table", "hpack.huffman")


def _defined_names(tree: ast.AST) -> set[str]:
    """The names a module defines: functions, classes, assignments, ``self.x = ...``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _library_private_names() -> set[str]:
    import importlib

    names: set[str] = set()
    for library in LIBRARIES:
        root = pathlib.Path(importlib.import_module(library).__file__ or "").parent
        for path in root.rglob("*.py"):
            names |= _defined_names(ast.parse(path.read_text(), str(path)))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _undocumented_names() -> set[str]:
    """The manifest's public-looking names, less those h2ping's own code defines
    outside the seam (its own ``streams``, say) and those that are documented on
    h2's connection (its ``receive_data``, not its streams')."""
    import h2.connection

    from h2ping.http2.engine.manifest import MANIFEST

    own: set[str] = set()
    for name, path in MODULES.items():
        if not name.startswith(SEAM):
            own |= _defined_names(ast.parse(path.read_text(), str(path)))
    connection = "h2.connection.H2Connection"
    specimen = h2.connection.H2Connection()  # its attributes, set in __init__, too
    documented = {
        n for n in [*vars(h2.connection.H2Connection), *vars(specimen)] if not n.startswith("_")
    }
    documented -= {reach.name for reach in MANIFEST if reach.owner == connection}
    return {reach.name for reach in MANIFEST if not reach.private} - own - documented


LIBRARY_PRIVATE = _library_private_names()
UNDOCUMENTED = _undocumented_names()


def _is_library(module: str) -> bool:
    return module.split(".")[0] in LIBRARIES


def reaches_past_the_api(name: str, source: str) -> list[str]:
    """What module ``name`` (with ``source``) does that only the seam may do."""
    if name == SEAM or name.startswith(SEAM + "."):
        return []
    tree = ast.parse(source)
    library_aliases = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_library(alias.name):
                    library_aliases.add((alias.asname or alias.name).split(".")[0])
                if alias.name.startswith(INTERNAL_MODULES):
                    found.append(f"line {node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and _is_library(node.module or ""):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if (
                    full.startswith(INTERNAL_MODULES)
                    or (node.module or "").startswith(INTERNAL_MODULES)
                    or alias.name.startswith("_")
                ):
                    found.append(f"line {node.lineno}: imports {full}")
                library_aliases.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                root = base
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in library_aliases:
                    found.append(f"line {node.lineno}: class {node.name} subclasses the library's")
        elif isinstance(node, ast.Attribute):
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if node.attr in LIBRARY_PRIVATE and not on_self:
                found.append(f"line {node.lineno}: .{node.attr}")
            elif node.attr in UNDOCUMENTED:
                found.append(f"line {node.lineno}: .{node.attr} (undocumented)")
    return found


def test_only_the_seam_reaches_past_the_libraries_api() -> None:
    found = {
        name: reaches
        for name, path in MODULES.items()
        if (reaches := reaches_past_the_api(name, path.read_text()))
    }
    assert not found


@pytest.mark.parametrize(
    "source",
    [
        "def f(conn):\n    return conn._engine._h2._data_to_send\n",
        "def f(conn):\n    conn._inbound_flow_control_window_manager.current_window_size -= 1\n",
        "def f(stream):\n    return stream.state_machine.state\n",
        "import h2.stream\n",
        "from h2.windows import WindowManager\n",
        "from hpack.huffman import HuffmanEncoder\n",
        "from h2 import connection\nx = connection._decode_headers\n",
        "import h2.connection\nclass C(h2.connection.H2Connection):\n    pass\n",
    ],
)
def test_the_guard_sees_a_reach_outside_the_seam(source: str) -> None:
    assert reaches_past_the_api("h2ping.http2.upstream", source)
    assert not reaches_past_the_api("h2ping.http2.engine.fastconnection", source)


# ------------------------------------------------- the plain engine and the fast layer
#
# Inside the seam, the plain engine is h2 on its documented API alone, and the
# fast layer is built on it: the plain engine imports nothing of the fast layer
# (so the fast layer's modules can be deleted), and reaches past the libraries'
# API no more than code outside the seam may.

PLAIN_ENGINE = {
    f"{SEAM}.{name}"
    for name in ("plain", "frames", "floodguard", "peerrules", "errortext", "opening")
}
FAST_LAYER = {name for name in MODULES if name.startswith(SEAM + ".")} - PLAIN_ENGINE


def fast_layer_imported(name: str, source: str | None = None) -> set[str]:
    return imports(name, source) & FAST_LAYER


def test_the_plain_engine_imports_nothing_of_the_fast_layer() -> None:
    assert f"{SEAM}.fast" in FAST_LAYER and f"{SEAM}.manifest" in FAST_LAYER
    found = {name: sorted(hit) for name in PLAIN_ENGINE if (hit := fast_layer_imported(name))}
    assert not found


def test_the_plain_engine_reaches_nothing_past_the_api() -> None:
    found = {
        name: reaches
        for name in PLAIN_ENGINE
        # Judged as a module outside the seam would be.
        if (reaches := reaches_past_the_api("h2ping.plain_engine", MODULES[name].read_text()))
    }
    assert not found


def test_the_plain_engine_guards_see_a_reach() -> None:
    assert fast_layer_imported(f"{SEAM}.plain", "from .manifest import DATA\n")
    assert fast_layer_imported(f"{SEAM}.frames", "def f():\n    from . import fastpaths\n")
    assert reaches_past_the_api(
        "h2ping.plain_engine", "def f(c):\n    return c.state_machine.state\n"
    )


def _state_writes(source: str, state: str) -> list[int]:
    """Lines of ``source`` that assign ``<something>.state = <state>.<member>``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assign):
            continue
        value = node.value  # a = X.A if c else X.B names two
        values = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        named = any(
            isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == state
            for v in values
        )
        if named and any(isinstance(t, ast.Attribute) and t.attr == "state" for t in node.targets):
            lines.append(node.lineno)
    return lines


def test_a_stream_is_the_only_writer_of_its_state() -> None:
    """One owner for each piece of state: StreamState changes in streams.py only."""
    writers = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := _state_writes(path.read_text(), "StreamState"))
    }
    assert list(writers) == ["http2/streams.py"], writers


def test_the_state_guard_sees_a_write_from_outside() -> None:
    assert _state_writes("stream.state = StreamState.SENT\n", "StreamState") == [1]
    assert _state_writes("s.state = StreamState.A if x else StreamState.B\n", "StreamState")
    assert not _state_writes("stream.state = other\n", "StreamState")


def test_an_upstream_connection_changes_state_through_its_table_only() -> None:
    """Its lifetime holds its state: outside ``_enter`` only ``__init__`` sets it
    (its first one); no other module sets a ``state`` to a ConnState."""
    from h2ping.http2.lifetime import _MOVES, ConnState

    tree = ast.parse((PACKAGE / "http2" / "lifetime.py").read_text())
    setters = [
        function.name
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "state" for t in node.targets)
    ]
    assert sorted(setters) == ["__init__", "_enter"], setters
    assert set(_MOVES) == set(ConnState)
    assert not _MOVES[ConnState.CLOSED]  # the end is the end
    assert all(ConnState.CLOSED in moves for state, moves in _MOVES.items() if moves)
    writers = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if _state_writes(path.read_text(), "ConnState")
    ]
    assert writers == ["http2/lifetime.py"], writers


# ------------------------------------------------- one writer for each piece of state

#: The modules of one upstream connection: the protocol and its end (upstream.py),
#: its state (lifetime.py), its stream table (streams.py), what the peer says to
#: it, its clocks.
UPSTREAM_CONNECTION = ("upstream.py", "lifetime.py", "streams.py", "peerevents.py", "clocks.py")

# ------------------------------------------------ one direction through a connection
#
# What the peer says goes one way: the engine tells peerevents.py, which tells the
# stream table and moves the connection's state through the connection's entries
# for it; the table reports (a slot free, a draining connection drained) and the
# connection decides. Neither ends the connection itself, and only the connection
# (and its table, for the last stream id) moves its state.

#: The calls that end an upstream connection (upstream.py's).
CONNECTION_ENDS = {"close", "cut", "abandon", "_end"}
#: The parts that report to the connection and never end it.
REPORTERS = ("peerevents.py", "streams.py")


def end_calls(source: str) -> list[str]:
    """Where ``source`` calls an end of a connection (``conn.close(...)``, ``cut``,
    ``abandon``, ``_end``). A stream's own ``close`` (``stream.close()``, in the
    table that forgets it) ends a stream, not a connection."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in CONNECTION_ENDS and ast.unparse(node.func.value) != "stream":
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}")
    return found


def test_what_the_peer_says_and_the_stream_table_never_end_the_connection() -> None:
    """A GOAWAY drains the connection (``retire``), and the connection closes when
    its table says it is drained: no call runs from them back into its end."""
    found = {
        name: calls
        for name in REPORTERS
        if (calls := end_calls((PACKAGE / "http2" / name).read_text()))
    }
    assert not found, found


@pytest.mark.parametrize(
    "source",
    [
        "def f(self):\n    self._conn.close('GOAWAY')\n",
        "def f(conn):\n    conn.cut('x', error)\n",
        "class T:\n    def g(self):\n        self._conn.close(self._conn.close_reason)\n",
        "def f(conn):\n    conn._end('x', error)\n",
    ],
)
def test_the_end_guard_sees_a_call_into_the_connections_end(source: str) -> None:
    assert end_calls(source)


def test_the_end_guard_lets_a_stream_close_and_reports_through() -> None:
    source = "def f(self, stream):\n    stream.close()\n    self._on_drained()\n"
    assert not end_calls(source)


#: The parts of one upstream connection: what happens in its life they tell its
#: observer (``http2/observer.py``), which counts and logs it; none counts it itself.
CONNECTION_PARTS = (
    "upstream",
    "peerevents",
    "clocks",
    "liveness",
    "lifetime",
    "writeblock",
    "streams",
    "inbound",
    "outbound",
    "windows",
)


def test_a_connections_life_is_counted_by_its_observer_alone() -> None:
    counting = {
        part: "h2ping.stats"
        for part in CONNECTION_PARTS
        if "h2ping.stats" in GRAPH[f"h2ping.http2.{part}"]
    }
    assert not counting, counting


def test_the_counting_guard_sees_a_part_import_the_counters() -> None:
    source = "from ..stats import Stats\n"
    assert "h2ping.stats" in imports("h2ping.http2.liveness", source)


#: The moves of a connection's state (lifetime.py's), and who makes them.
STATE_MOVES = {"open", "drain", "end"}
MOVERS = {
    "http2/upstream.py": {"open", "drain", "end"},  # the peer's SETTINGS and GOAWAY, its end
    "http2/streams.py": {"drain"},  # the last usable stream id was used
}


def state_moves(source: str) -> set[str]:
    """The moves ``source`` makes of a connection's lifetime (``x.lifetime.open()``,
    ``self._life.drain(...)``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver = node.func.value
        name = receiver.attr if isinstance(receiver, ast.Attribute) else ""
        name = receiver.id if isinstance(receiver, ast.Name) else name
        if node.func.attr in STATE_MOVES and name.lstrip("_") in ("lifetime", "life"):
            found.add(node.func.attr)
    return found


def test_only_the_connection_moves_its_state() -> None:
    """The peer's events reach the state through the connection's own entries
    (``settings_received``, ``retire``), so that what each move means (the dial
    answered, the pool told, a drained connection closed) is in one place."""
    found = {
        str(path.relative_to(PACKAGE)): moves
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "lifetime.py" and (moves := state_moves(path.read_text()))
    }
    assert found == MOVERS, found


def test_the_move_guard_sees_a_move() -> None:
    assert state_moves("def f(self):\n    self._conn.lifetime.drain('GOAWAY')\n") == {"drain"}
    assert state_moves("def f(life):\n    life.open()\n    life.end('x')\n") == {"open", "end"}
    assert not state_moves("def f(self):\n    self._conn.retire('GOAWAY')\n")


def test_an_upstream_connection_wires_its_parts_without_lambdas() -> None:
    """Its parts take the connection, or its bound methods: what each calls is named."""
    found = {
        name: [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Lambda)]
        for name in UPSTREAM_CONNECTION
        if "lambda" in (source := (PACKAGE / "http2" / name).read_text())
    }
    assert not any(found.values()), found


def foreign_writes(source: str) -> list[str]:
    """Where ``source`` assigns an attribute of anything but ``self``: a piece of
    state that another object owns, changed behind its back."""
    return [
        f"line {node.lineno}: {ast.unparse(target)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and not (isinstance(target.value, ast.Name) and target.value.id == "self")
    ]


def write_ruled(path: pathlib.Path) -> bool:
    """The modules held to one writer: the HTTP/1.1 side, forward/, and the HTTP/2
    side but its engine (the seam writes h2's state by design: the manifest and the
    tests above hold it)."""
    relative = path.relative_to(PACKAGE).parts
    return relative[0] in ("http1", "forward") or (
        relative[0] == "http2" and relative[1] != "engine"
    )


#: Writes the rule lets through, by module and the object written, each with why.
ALLOWED_WRITES = {
    ("forward/pool.py", "exc"): "an error met while dialling learns the number of the"
    " connection it was met on, which the pool gives, before it is raised to requests",
    ("http2/dial.py", "error"): "a TLS error's detail, completed with the forward"
    " proxy's part before it is raised",
    ("http2/dial.py", "context"): "ssl.SSLContext: the standard library's settings are attributes",
    ("http2/dial.py", "steps"): "the dial's report (DialSteps), a record filled in as each"
    " step ends, for the check",
    ("http2/tunnel.py", "hop"): "the hop's report (Hop), filled in as the tunnel opens",
    ("http2/tunnel.py", "self._hop"): "the same report, by the protocol that opens it",
}


def _written_object(write: str) -> str:
    """``line 3: steps.tcp`` -> ``steps``."""
    return write.split(": ", 1)[1].rsplit(".", 1)[0]


def test_each_module_writes_only_its_own_objects_state() -> None:
    """The connection and its parts, the client's connection and its reader, the
    exchange and the pool ask one another through methods; none assigns another
    object's attributes. The allowed writes are there still (else: drop them)."""
    found: dict[str, list[str]] = {}
    allowed_seen = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if not write_ruled(path):
            continue
        name = str(path.relative_to(PACKAGE))
        for write in foreign_writes(path.read_text()):
            if (name, _written_object(write)) in ALLOWED_WRITES:
                allowed_seen.add((name, _written_object(write)))
            else:
                found.setdefault(name, []).append(write)
    assert not found, found
    assert allowed_seen == set(ALLOWED_WRITES)
    assert {name for name in UPSTREAM_CONNECTION if write_ruled(PACKAGE / "http2" / name)} == set(
        UPSTREAM_CONNECTION
    )


def test_the_write_guard_sees_a_write_from_outside() -> None:
    assert foreign_writes("def f(conn):\n    conn.table.reserved -= 1\n")
    assert foreign_writes("def f(conn):\n    conn.state = None\n")
    assert foreign_writes("def f(request):\n    request.body_complete = True\n")
    assert foreign_writes("class C:\n    def f(self):\n        self._clients.on_leave = None\n")
    assert not foreign_writes("class C:\n    def f(self):\n        self.state = None\n")
    assert write_ruled(PACKAGE / "http1" / "reader.py")
    assert write_ruled(PACKAGE / "forward" / "exchange.py")
    assert not write_ruled(PACKAGE / "http2" / "engine" / "plain.py")


# ------------------------------------------------- one holder of a connection's streams


def table_stream_reads(source: str) -> list[str]:
    """Where ``source`` reads the streams of a stream table (``conn.table.streams``,
    ``table.streams``, ``self._table.streams``): the table is their one holder, and
    others look a stream up through its methods (``stream``, ``above``, ``count``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Attribute) and node.attr == "streams"):
            continue
        holder = node.value
        if isinstance(holder, ast.Attribute):
            name = holder.attr
        elif isinstance(holder, ast.Name):
            name = holder.id
        else:
            continue
        if name.lstrip("_") == "table":
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_stream_tables_module_reads_its_streams() -> None:
    """Outside streams.py (the table's own module) nothing in h2ping reaches into
    a table's streams: what the peer says about a stream finds it by id."""
    found = {
        str(path.relative_to(PACKAGE)): reads
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "http2" / "streams.py"
        and (reads := table_stream_reads(path.read_text()))
    }
    assert not found, found


def test_the_table_guard_sees_a_read_of_its_streams() -> None:
    assert table_stream_reads("def f(conn):\n    return conn.table.streams.get(1)\n")
    assert table_stream_reads("def f(table):\n    return len(table.streams)\n")
    assert table_stream_reads("class C:\n    def f(self):\n        return self._table.streams\n")
    assert not table_stream_reads("def f(conn):\n    return conn.table.stream(1)\n")
    assert not table_stream_reads("def f(h2):\n    return h2.streams\n")


# ------------------------------------------ no class built on another package's


def subclassed(name: str, source: str | None = None) -> list[tuple[str, str]]:
    """The classes module ``name`` (or ``source`` in its place) defines on a class of
    another package of h2ping (``forward``, ``http2``, ...; the shared leaves, its
    errors say, are there to be built on): (class, the module of its base)."""
    path = MODULES[name]
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text() if source is None else source)
    origin: dict[str, str] = {}  # a name bound by an import -> the module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                origin[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = ".".join([*base[: len(base) - node.level + 1], module]).rstrip(".")
            for alias in node.names:
                full = f"{module}.{alias.name}"
                origin[alias.asname or alias.name] = full if full in MODULES else module
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for written in node.bases:
            head, *rest = ast.unparse(written).split(".")
            module = origin.get(head)
            if module is None:
                continue
            for part in rest[:-1]:  # h2ping.http2.upstream.UpstreamConnection
                if f"{module}.{part}" not in MODULES:
                    break
                module = f"{module}.{part}"
            home = part_of(module)
            if module in MODULES and home is not None and home != part_of(name):
                found.append((node.name, module))
    return found


#: Classes built on another package's, each with why.
ALLOWED_SUBCLASSES: dict[tuple[str, str], str] = {}


def test_no_class_is_built_on_a_class_of_another_package() -> None:
    """A class of the HTTP/2 side (an upstream connection, its peer-event handler)
    is changed by its owners alone: a subclass elsewhere would rely on the order its
    methods run in. The allowed ones are there still (else: drop them)."""
    found = {(name, cls): module for name in sorted(MODULES) for cls, module in subclassed(name)}
    assert set(found) == set(ALLOWED_SUBCLASSES), found


@pytest.mark.parametrize(
    "source",
    [
        "from ..http2.upstream import UpstreamConnection\nclass C(UpstreamConnection):\n    pass\n",
        "from ..http2 import upstream\nclass C(upstream.UpstreamConnection):\n    pass\n",
        "import h2ping.http2.streams\nclass C(h2ping.http2.streams.UpstreamStream):\n    pass\n",
        "from ..http1.listener import ClientConnection as Base\nclass C(Base):\n    pass\n",
        "from ..process.proxy import Proxy\nclass C(Proxy):\n    pass\n",
    ],
)
def test_the_subclass_guard_sees_a_class_built_across_packages(source: str) -> None:
    assert subclassed("h2ping.forward.exchange", source)


def test_the_subclass_guard_lets_its_own_package_and_the_leaves_through() -> None:
    source = (
        "from ..errors import UpstreamError\nclass E(UpstreamError):\n    pass\n"
        "from .pool import Pool\nclass P(Pool):\n    pass\n"
        "import asyncio\nclass Q(asyncio.Protocol):\n    pass\n"
    )
    assert not subclassed("h2ping.forward.exchange", source)


#: Underscored names of the standard library's public API.
PUBLIC_UNDERSCORED = {"_exit", "_replace"}  # os._exit, a namedtuple's _replace


def others_private_reads(source: str) -> list[str]:
    """Where ``source`` reaches into another object's private attribute (``x._name``,
    ``x`` not ``self`` or ``cls``) that its own module does not define: the state of
    a class of another module, which that class alone should touch."""
    tree = ast.parse(source)
    own = _defined_names(tree) | PUBLIC_UNDERSCORED
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            holder, attr = node.value, node.attr
        elif (  # getattr(x, "_name"), setattr, hasattr, delattr: the same reach
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            holder, attr = node.args[0], node.args[1].value
        else:
            continue
        on_self = isinstance(holder, ast.Name) and holder.id in ("self", "cls")
        if attr.startswith("_") and not attr.startswith("__") and not on_self and attr not in own:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_modules_private_state() -> None:
    """One owner for each piece of state: a response writer, say, asks the
    connection's output to take a response back; it reads none of its queue.
    (The seam reaches into h2's by design: the tests above hold it.)"""
    found = {
        name: reads
        for name, path in MODULES.items()
        if not name.startswith(SEAM) and (reads := others_private_reads(path.read_text()))
    }
    assert not found, found


def test_the_private_state_guard_sees_a_reach() -> None:
    assert others_private_reads("def f(writer):\n    return writer._output._flushes\n")
    assert others_private_reads("def f(conn):\n    conn._out.clear()\n")
    assert others_private_reads("def f(conn):\n    return getattr(conn, '_out', None)\n")
    assert others_private_reads("def f(conn):\n    setattr(conn, '_out', [])\n")
    assert not others_private_reads("def f(conn):\n    return getattr(conn, 'out', None)\n")
    owner = "class Q:\n    def __init__(self):\n        self._out = []\n"
    assert not others_private_reads(owner + "def f(q):\n    return q._out\n")


def reader_callbacks(source: str) -> list[str]:
    """How ``source`` could call back into whoever feeds it: an interface it
    declares for its caller to implement (a ``Protocol``), or a class made with
    something to call (an ``__init__`` that takes more than ``self``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        if any(ast.unparse(base).endswith("Protocol") for base in node.bases):
            found.append(f"line {node.lineno}: {node.name} is an interface for its caller")
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                arguments = item.args
                taken = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs][1:]
                if taken or arguments.vararg or arguments.kwarg:
                    found.append(f"line {item.lineno}: {node.name} is made with something")
    return found


def test_the_request_reader_hands_back_values_and_calls_no_one_above() -> None:
    """The client connection feeds its reader and acts on what it hands back (as
    h11's events): the reader is made with nothing and declares no interface for
    the connection to implement, so nothing it parses calls back up into the
    connection while the connection's call into it is under way."""
    assert reader_callbacks((PACKAGE / "http1" / "reader.py").read_text()) == []


@pytest.mark.parametrize(
    "source",
    [
        "class ReadEvents(Protocol):\n    def request_read(self, request): ...\n",
        "class Events(typing.Protocol):\n    pass\n",
        "class RequestReader:\n    def __init__(self, events):\n        self._events = events\n",
        "class RequestReader:\n    def __init__(self, *, on_request):\n        pass\n",
    ],
)
def test_the_reader_guard_sees_a_way_back_up(source: str) -> None:
    assert reader_callbacks(source)


def test_the_reader_guard_lets_a_reader_of_its_own_through() -> None:
    source = "class RequestReader:\n    def __init__(self):\n        self.state = 1\n"
    assert not reader_callbacks(source)


# A schedule says when; the connection acts. The inbound schedule is given one
# callable of its connection's (its turn), which it hands to the loop and never
# calls: a call from the schedule would run the connection's batch (the engine,
# the streams, the clients) under the schedule's frame, which the connection had
# called to ask for its budget: a round trip through the calls, and one more
# place where the order of things is decided.
SCHEDULES = {"h2ping.http2.inbound": "InboundTurns"}


def callbacks_called(source: str, cls: str) -> list[str]:
    """Calls ``cls`` makes of the callables its ``__init__`` was given (parameters
    annotated ``Callable[...]``, kept as ``self.<name>``): handing one to the loop
    (``call_soon(self._turn, ...)``) is no call."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.name == cls):
            continue
        given: set[str] = set()
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                taken = {
                    a.arg
                    for a in item.args.args
                    if a.annotation is not None and "Callable" in ast.unparse(a.annotation)
                }
                for sub in ast.walk(item):
                    if (
                        isinstance(sub, ast.Assign)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in taken
                    ):
                        given |= {t.attr for t in sub.targets if isinstance(t, ast.Attribute)}
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and isinstance(sub.func.value, ast.Name)
                and sub.func.value.id == "self"
                and sub.func.attr in given
            ):
                found.append(f"line {sub.lineno}: {ast.unparse(sub)}")
    return found


def test_a_schedule_hands_its_connections_turn_to_the_loop_and_never_calls_it() -> None:
    """The connection asks its inbound schedule for a budget and tells it what it
    took (values); the schedule calls the connection only from the loop."""
    found = {
        name: calls
        for name, cls in SCHEDULES.items()
        if (calls := callbacks_called(MODULES[name].read_text(), cls))
    }
    assert not found, found


def test_the_schedule_guard_sees_a_call_of_what_it_was_given() -> None:
    init = (
        "class S:\n"
        "    def __init__(self, loop, turn: Callable[[bool], None], n: int) -> None:\n"
        "        self._loop = loop\n"
        "        self._turn = turn\n"
        "        self._n = n\n"
    )
    assert callbacks_called(init + "    def f(self):\n        self._turn(True)\n", "S")
    assert not callbacks_called(
        init + "    def f(self):\n        self._loop.call_soon(self._turn, True)\n", "S"
    )
    assert not callbacks_called(init + "    def f(self):\n        self._loop.time()\n", "S")
