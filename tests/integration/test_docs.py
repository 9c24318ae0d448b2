"""The README and the pages of docs/ held to the program.

- The flags tables (the README's, and docs/check.md's for ``h2ping check``) list every
  flag that ``--help`` lists, no other, with the defaults of the flag definitions; the
  README gives each setting the meaning its declaration in config.py gives it.
- docs/observability.md lists every metric family a real ``/metrics`` scrape has, no
  other, with the type and labels the scrape has.
- Relative links lead to files of the repository, and their ``#anchors`` to headings.
- Shell examples run. Each ``bash`` or ``sh`` block carries an HTML comment just before
  it that says how it is tested (docs/testing.md, "Docs that tests hold true"):

  ``<!-- test: runs -->``                 runs as one script, must exit 0
  ``<!-- test: runs after install -->``   the same, without the venv and pip steps
  ``<!-- test: runs as pasted -->``       as pasted into a shell: one ``bash -c``
                                          without ``set -e``, background jobs and
                                          all; it must exit 0 and leave no process
  ``...; output has "TEXT"``              and its output must contain TEXT
  ``<!-- test: serves -->``               each command starts a proxy, which must
                                          serve a request and stop on SIGTERM
  ``<!-- test: script NAME ARGS -->``     saved as the executable NAME, run with ARGS
  ``<!-- test: skip, REASON -->``         not run; the reason is the skip's

  In what runs, ``https://api.example.com`` is a scripted HTTP/2 server (h2c) on
  loopback, ports 1250, 9901 and 8443 of 127.0.0.1 are free ports (``H2PING_LISTEN``
  names the first, for commands that leave ``-listen`` at its default; ``--port 8443``
  moves with the last), and ``/tmp/`` is the test's own directory, where the examples
  run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from h2ping.config import CheckSettings, Config
from h2ping.flags import _CHECK_OWN, _FLAGS
from h2ping.settings import declarations
from h2ping.testing import ScriptedUpstream

from .. import procguard
from ..conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

TIMEOUT = 60.0  # seconds for one example, or one scrape's proxy, to do its part


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- Markdown ---------------------------------------------------------------------------

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*test:\s*(.*?)\s*-->\s*$")


def outside_code(path: Path) -> list[str]:
    """The lines of ``path``, those of fenced code blocks blanked (a ``#`` line there is
    no heading, a ``[x](y)`` no link)."""
    out, fence = [], None
    for line in path.read_text().splitlines():
        if fence is None and (opening := _FENCE.match(line)):
            fence = opening.group(1)
            out.append("")
        elif fence is not None:
            if re.match(rf"^{fence}```\s*$", line):
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def section(path: Path, heading: str) -> str:
    """The text under ``## heading`` up to the next heading of level 2 or above."""
    lines = path.read_text().splitlines()
    plain = outside_code(path)
    starts = [i for i, line in enumerate(plain) if re.match(r"^#{1,2} ", line)]
    start = next((i for i in starts if plain[i] == f"## {heading}"), None)
    assert start is not None, f"{rel(path)} has no section '## {heading}'"
    end = next((i for i in starts if i > start), len(lines))
    return "\n".join(lines[start + 1 : end])


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the Markdown tables in ``text``, header rows left out."""
    lines = text.splitlines()
    rule = re.compile(r"^\|[\s|:-]+\|$")
    rows = []
    for i, line in enumerate(lines):
        header = i + 1 < len(lines) and rule.match(lines[i + 1])
        if line.startswith("|") and not rule.match(line) and not header:
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
    return rows


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


@dataclasses.dataclass
class Block:
    """A fenced code block and the test marker before it."""

    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None

    @property
    def id(self) -> str:
        return f"{rel(self.path)}:{self.line}"


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, lang = opening.groups()
        end = i + 1
        while not re.match(rf"^{indent}```\s*$", lines[end]):
            end += 1
        before = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
        marker = _MARKER.match(before)
        body = "\n".join(ln[len(indent) :] for ln in lines[i + 1 : end]) + "\n"
        yield Block(path, i + 1, lang, body, marker.group(1) if marker else None)
        i = end + 1


def shell_blocks() -> list[Block]:
    return [b for path in PAGES for b in blocks(path) if b.lang in ("bash", "sh")]


def prose(path: Path) -> str:
    """The text outside code blocks and code spans: where links are."""
    return re.sub(r"`[^`\n]*`", "", "\n".join(outside_code(path)))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, without markup and
    punctuation (letters, digits, ``_``, ``-`` and spaces stay), spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = "\n".join(outside_code(path))
    for heading in re.findall(r"^#{1,6} (.+?)\s*#*$", text, re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))
    return found


# --- flags --------------------------------------------------------------------------------


def help_flags(*argv: str) -> set[str]:
    """The flags ``python -m h2ping ARGV`` (a help) lists, ``-h`` and ``-help`` included."""
    out = subprocess.run(
        [sys.executable, "-m", "h2ping", *argv], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    names: set[str] = set()
    for line in out.stdout.splitlines():
        if match := re.match(r"^  (-[\w-]+)(?:, (-[\w-]+))?(?:\s|$)", line):
            names.update(n for n in match.groups() if n)
    assert names, out.stdout
    return names


def documented_flags(path: Path, heading: str) -> dict[str, str]:
    """Flag -> the default its table gives (the first code span of the cell, else its
    text; "" when empty)."""
    rows = [row for row in table_rows(section(path, heading)) if row[0].startswith("`-")]
    assert rows, f"no flags table under '## {heading}' in {rel(path)}"
    table: dict[str, str] = {}
    for row in rows:
        spans = code_spans(row[1])
        for name in code_spans(row[0]):
            assert name not in table, f"{rel(path)}: {name} has two rows"
            table[name] = spans[0] if spans else row[1]
    return table


_DEFINITIONS = {flag.name: flag for flag in (*_FLAGS, *_CHECK_OWN)}
_FIELDS = {f.name: f for kind in (Config, CheckSettings) for f in dataclasses.fields(kind)}


def default_is(name: str, documented: str) -> bool:
    """Whether ``documented`` is the default of the flag ``name`` as the program defines
    it: the default of its setting, or the words its definition shows for one that has
    no value (``none``, ``off``), read with the flag's own parser."""
    flag = _DEFINITIONS.get(name.removeprefix("-"))
    if flag is None:  # -h, -help, -version: no value, no default
        return documented == ""
    if flag.shown_default is not None:
        return documented == flag.shown_default
    field = _FIELDS[flag.field]
    if field.default is not dataclasses.MISSING:
        default: Any = field.default
    elif field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        return documented == "required"
    try:
        value = flag.type.parse(documented)
    except ValueError:
        return False
    return bool(value == default or str(default) == documented)


@pytest.mark.parametrize(
    ("page", "heading", "argv"),
    [(README, "Usage", ["--help"]), (DOCS / "check.md", "Flags", ["check", "-h"])],
    ids=["README", "check"],
)
def test_flags_tables_match_the_program(page: Path, heading: str, argv: list[str]) -> None:
    table = documented_flags(page, heading)
    listed = help_flags(*argv)
    missing, unknown = sorted(listed - table.keys()), sorted(table.keys() - listed)
    assert not missing, f"flags of {' '.join(argv)} missing from {rel(page)}'s table: {missing}"
    assert not unknown, f"rows of {rel(page)}'s table for no flag of the program: {unknown}"
    wrong = {name: given for name, given in table.items() if not default_is(name, given)}
    assert not wrong, f"defaults in {rel(page)} the program does not have: {wrong}"


def meanings(table: str) -> dict[str, str]:
    """Flag -> the meaning (third cell) of its row in the flags table of ``table``."""
    rows = [row for row in table_rows(table) if row[0].startswith("`-")]
    return {name: row[2] for row in rows for name in code_spans(row[0])}


def meanings_unlike_the_declarations(table: str) -> list[str]:
    """Each setting whose row in ``table`` is missing or means other than its
    declaration says, as ``-flag: the declared meaning``."""
    given = meanings(table)
    return [
        f"-{declared.name}: {declared.doc}"
        for declared in declarations(Config)
        if given.get(f"-{declared.name}") != declared.doc
    ]


def test_the_readme_gives_each_setting_its_declared_meaning() -> None:
    wrong = meanings_unlike_the_declarations(section(README, "Usage"))
    assert not wrong, "README rows unlike the settings' doc= in config.py:\n" + "\n".join(wrong)


def test_a_readme_row_missing_or_reworded_is_seen() -> None:
    usage = section(README, "Usage")
    [row] = [line for line in usage.splitlines() if line.startswith("| `-max-receive-window` ")]
    [declared] = [d for d in declarations(Config) if d.name == "max-receive-window"]
    expected = [f"-max-receive-window: {declared.doc}"]
    assert meanings_unlike_the_declarations(usage.replace(row + "\n", "")) == expected
    reworded = usage.replace(row, row.replace("grows with", "follows"))
    assert meanings_unlike_the_declarations(reworded) == expected


# --- metrics ------------------------------------------------------------------------------

#: Flags that make every metric family appear: some exist only with -workers above 1,
#: -loop-lag-interval or -access-log.
METRIC_FLAGS = ["-workers", "2", "-loop-lag-interval", "50ms", "-shutdown-grace", "1s"]


def documented_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """Family -> (type, label names), from the table of docs/observability.md."""
    page = DOCS / "observability.md"
    rows = [row for row in table_rows(section(page, "Metrics")) if row[0].startswith("`")]
    families: dict[str, tuple[str, frozenset[str]]] = {}
    for row in rows:
        for span in code_spans(row[0]):
            match = re.fullmatch(r"(\w+)(?:\{([\w,]+)\})?", span)
            assert match, f"{rel(page)}: cannot read metric {span!r}"
            name, labels = match.groups()
            families["h2ping_" + name] = (row[1], frozenset((labels or "").split(",")) - {""})
    assert families
    return families


def scraped_metrics(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """Family -> (type, label names) of an exposition text (``le`` left out)."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    labels: dict[str, set[str]] = {name: set() for name in types}
    for name, braced in re.findall(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})? ", text, re.M):
        family = next(f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name)) if f in types)
        labels[family].update(re.findall(r"(\w+)=\"", braced))
    return {name: (kind, frozenset(labels[name] - {"le"})) for name, kind in types.items()}


@pytest.fixture
async def upstream() -> AsyncIterator[ScriptedUpstream]:
    async with ScriptedUpstream() as server:  # answers each request with its own body
        yield server


@pytest.mark.one_loop  # the loop under test is the proxy's, in its own process
async def test_metrics_documented_are_those_emitted(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    port, admin = free_port(), free_port()
    argv = ["-upstream", upstream.url, "-listen", f"127.0.0.1:{port}",
            "-admin-listen", f"127.0.0.1:{admin}", "-access-log", str(tmp_path / "access.log"),
            *METRIC_FLAGS]  # fmt: skip
    async with running(f"exec {shlex.join([sys.executable, '-m', 'h2ping', *argv])}") as proc:
        await proc.until("admin endpoint on")
        async with aiohttp.ClientSession() as client:
            async with client.post(f"http://127.0.0.1:{port}/v1/chat", data=b"hi") as resp:
                assert resp.status == 200
            async with client.get(f"http://127.0.0.1:{admin}/metrics") as resp:
                assert resp.status == 200
                text = await resp.text()
        assert await proc.stop() == 0, proc.output
    emitted, documented = scraped_metrics(text), documented_metrics()
    undocumented = sorted(emitted.keys() - documented.keys())
    assert not undocumented, f"families in /metrics, not in docs/observability.md: {undocumented}"
    absent = sorted(documented.keys() - emitted.keys())
    assert not absent, f"families in docs/observability.md, not in /metrics: {absent}"
    differ = {name: (documented[name], seen) for name, seen in emitted.items()
              if documented[name] != seen}  # fmt: skip
    assert not differ, f"type or labels differ (documented, emitted): {differ}"


# --- links --------------------------------------------------------------------------------


def links(path: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", prose(path))


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_links_lead_somewhere(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):  # https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.is_relative_to(ROOT) or not dest.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {rel(dest)}")
    assert not broken, f"{rel(page)}: {broken}"


def test_every_page_is_linked_from_the_front_page() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    orphans = [rel(page) for page in PAGES[1:] if page not in linked]
    assert not orphans, "pages the README does not link to"


# --- shell examples -----------------------------------------------------------------------

_KINDS = ("runs", "runs after install", "runs as pasted", "serves", "script", "skip")


def kind(marker: str) -> str:
    head = marker.split(";")[0].split(",")[0].strip()
    return "script" if head.startswith("script ") else head


def test_every_shell_example_says_how_it_is_tested() -> None:
    unmarked = [b.id for b in shell_blocks() if b.marker is None]
    assert not unmarked, f"shell blocks without a <!-- test: ... --> marker: {unmarked}"
    unknown = [f"{b.id}: {b.marker}" for b in shell_blocks() if kind(b.marker or "") not in _KINDS]
    assert not unknown, f"markers of no known kind ({', '.join(_KINDS)}): {unknown}"
    # A server started in the background is waited for, or what follows runs too soon.
    unwaited = [
        b.id
        for b in shell_blocks()
        if re.search(r"&(\s|$)(?!&)", b.text.replace("&&", ""))
        and (kind(b.marker or "") not in ("runs as pasted", "script") or "ready" not in b.text)
    ]
    assert not unwaited, f"blocks that start a server and wait for no ready file: {unwaited}"
    no_reason = [b.id for b in shell_blocks() if re.fullmatch(r"skip,?\s*", b.marker or "")]
    assert not no_reason, f"skipped without a reason: {no_reason}"
    for path in PAGES:
        fenced = {b.line for b in blocks(path)}
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if _MARKER.match(line):
                following = next(n for n in range(number + 1, len(lines) + 1)
                                 if lines[n - 1].strip())  # fmt: skip
                assert following in fenced, f"{rel(path)}:{number}: a marker before no block"


class Running:
    """A ``bash -c`` script in a process group of its own; its output, read as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.output = ""
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.output += line.decode(errors="replace")

    async def until(self, text: str) -> str:
        """The first output line holding ``text``, once it has come."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while True:
            ended = self._reader.done()  # before looking: the last lines are in by then
            line = next((ln for ln in self.output.splitlines() if text in ln), None)
            if line is not None:
                return line
            assert not ended, f"ended ({self.proc.returncode}) before {text!r}:\n{self.output}"
            assert loop.time() < deadline, f"no {text!r} within {TIMEOUT}s:\n{self.output}"
            await asyncio.sleep(0.05)

    async def wait(self) -> int:
        try:
            code = await asyncio.wait_for(self.proc.wait(), TIMEOUT)
            await asyncio.wait_for(self._reader, TIMEOUT)
        except TimeoutError:
            raise AssertionError(f"still running after {TIMEOUT}s:\n{self.output}") from None
        return code

    async def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return await self.wait()


@dataclasses.dataclass
class Place:
    """What the examples' names stand for in a run."""

    upstream: str
    directory: Path
    ports: dict[str, str] = dataclasses.field(
        default_factory=lambda: {p: str(free_port()) for p in ("1250", "9901", "8443")}
    )

    def fill(self, text: str) -> str:
        text = text.replace("https://api.example.com", self.upstream)
        for port, free in self.ports.items():
            text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
            text = re.sub(rf"--port {port}\b", f"--port {free}", text)
        return text.replace("/tmp/", f"{self.directory}/")

    def env(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)  # python, h2ping, h2-ping-sidecar
        return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
                "TMPDIR": str(self.directory), "PYTHONUNBUFFERED": "1",
                # for the commands without -listen, whose default is 127.0.0.1:1250
                "H2PING_LISTEN": f"127.0.0.1:{self.ports['1250']}"}  # fmt: skip


@contextlib.asynccontextmanager
async def running(script: str, place: Place | None = None) -> AsyncIterator[Running]:
    """The script under bash, in a process group of its own, which is killed whole when
    the block ends."""
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", script,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        cwd=place.directory if place else None, env=place.env() if place else None,
        preexec_fn=procguard.in_own_group,
    )  # fmt: skip
    procguard.reaper().watch(proc.pid)
    try:
        yield Running(proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        procguard.reaper().forget(proc.pid)
        await proc.wait()


def group_alive(pgid: int) -> bool:
    """Whether a process of the group ``pgid`` is left (one that a script started)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def commands(script: str) -> list[str]:
    """The commands of a block: continued lines joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", script)
    return [
        ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]


def expected_output(marker: str) -> str | None:
    match = re.search(r"output has (\"[^\"]*\"|'[^']*')", marker)
    return match.group(1)[1:-1] if match else None


_INSTALL = re.compile(
    r"^python3 -m venv \.venv && \. \.venv/bin/activate && pip install \S+ && (.+)$"
)


async def serve(command: str, place: Place) -> None:
    """Start one proxy command, send it a request, stop it: it must exit 0."""
    ready = re.search(r"-ready-file[= ](\S+)", command)
    async with running(f"exec env {command}", place) as proc:
        line = await proc.until("listening on")
        address = re.search(r"listening on (\S+)", line)
        assert address, line
        async with aiohttp.ClientSession() as client:
            async with client.get(f"http://{address.group(1)}/v1/models") as resp:
                assert resp.status == 200, (command, await resp.text())
            if "-admin-listen" in command:
                admin = re.search(r"admin endpoint on (\S+):", await proc.until("admin endpoint"))
                assert admin
                async with client.get(f"http://{admin.group(1)}/healthz") as resp:
                    assert resp.status == 200
        if ready:  # written once every worker listens
            path = Path(ready.group(1))
            for _ in range(100):
                if path.exists():
                    break
                await asyncio.sleep(0.05)
            assert path.read_text().strip().isdigit(), f"{path}: no PID in the ready file"
        assert await proc.stop() == 0, proc.output
        assert "stopped:" in proc.output, proc.output
    if ready:
        assert not Path(ready.group(1)).exists(), "the ready file is left after the exit"


@pytest.mark.one_loop  # the loops under test are the examples' processes
@pytest.mark.parametrize("block", shell_blocks(), ids=lambda b: b.id)
async def test_shell_example_runs(block: Block, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    marker = block.marker or ""
    what = kind(marker)
    if what == "skip":
        pytest.skip(marker.partition(",")[2].strip() or "no reason")
    place = Place(upstream.url, tmp_path)
    if what == "serves":
        for command in commands(place.fill(block.text)):
            await serve(command, place)
        return
    script = place.fill(block.text)
    if what == "runs after install":
        [command] = commands(script)
        match = _INSTALL.match(command)
        assert match, f"{block.id}: no venv and pip install in front of {command!r}"
        script = match.group(1)
    elif what == "script":
        name, *args = shlex.split(place.fill(marker.split(";")[0]))[1:]
        (tmp_path / name).write_text(script)
        (tmp_path / name).chmod(0o755)
        script = shlex.join([f"./{name}", *args])
    if what == "runs as pasted":
        # As a shell runs what is pasted into it: each line in turn, on whatever the
        # one before did; what it started in the background it must have stopped.
        async with running(script, place) as proc:
            code = await proc.wait()
            left = group_alive(proc.proc.pid)
        assert not left, f"{block.id} left a process running:\n{proc.output}"
    else:
        async with running(f"set -e\n{script}", place) as proc:
            code = await proc.wait()
    assert code == 0, f"{block.id} exited {code}:\n{proc.output}"
    wanted = expected_output(marker)
    if wanted is not None:
        assert wanted in proc.output, f"{block.id}: no {wanted!r} in:\n{proc.output}"
