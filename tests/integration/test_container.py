"""The container image, without a container engine: the Dockerfile's install steps are
those of docs/running.md, they build a working install in a fresh venv, and its
HEALTHCHECK command works against a running admin endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from h2ping.flags import _FLAGS

from ..conftest import running_proxy

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
README = ROOT / "README.md"
RUNNING = ROOT / "docs" / "running.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]


def instructions() -> list[tuple[int, str, str]]:
    """(stage, KEYWORD, arguments) for each Dockerfile instruction, continuations joined."""
    out: list[tuple[int, str, str]] = []
    stage, pending = -1, ""
    for line in DOCKERFILE.read_text().splitlines():
        text = line.strip()
        if not pending and (not text or text.startswith("#")):
            continue
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        keyword, _, args = (pending + text).partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stage += 1
        out.append((stage, keyword.upper(), args.strip()))
    return out


def run_commands(stage: int | None = None) -> list[str]:
    """The shell commands of RUN instructions (options such as --mount removed)."""
    commands = []
    for st, keyword, args in instructions():
        if keyword == "RUN" and stage in (None, st):
            args = re.sub(r"^(--\S+\s+)+", "", args)
            commands += [part.strip() for part in args.split("&&")]
    return commands


def pip_steps() -> list[str]:
    return [cmd for cmd in run_commands() if cmd.startswith("pip ")]


def documented_install_steps() -> list[str]:
    """The first bash block of the Container section of docs/running.md."""
    section = RUNNING.read_text().split("\n## Container\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "no install block in the Container section of docs/running.md"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip()]


def test_sections_the_dockerfile_names_exist() -> None:
    headings = set(re.findall(r"^## (.+)$", RUNNING.read_text(), re.MULTILINE))
    named = re.findall(r"docs/running.md's \"([^\"]+)\" section", DOCKERFILE.read_text())
    assert named, "the Dockerfile no longer says where its steps come from"
    assert set(named) <= headings, set(named) - headings


def only(keyword: str, stage: int = 1) -> str:
    [args] = [a for st, kw, a in instructions() if kw == keyword and st == stage]
    return args


def test_dockerfile_installs_as_the_readme_says() -> None:
    steps = pip_steps()
    assert [s.split()[:2] for s in steps] == [["pip", "wheel"], ["pip", "install"]], steps
    assert steps == documented_install_steps()
    # The wheel is built in the first stage and only installed in the second.
    assert [c for c in run_commands(0) if c.startswith("pip ")] == steps[:1]
    assert [c for c in run_commands(1) if c.startswith("pip ")] == steps[1:]


def test_final_image_shape() -> None:
    froms = [args for _, kw, args in instructions() if kw == "FROM"]
    assert froms == ["python:3.11-slim AS build", "python:3.11-slim"]
    final = " ".join(run_commands(1))
    for tool in ("apt-get", "gcc", "build-essential", "pip wheel"):
        assert tool not in final, tool
    user = only("USER").split(":")
    assert user[0].isdigit() and int(user[0]) > 0, user
    assert json.loads(only("ENTRYPOINT")) == ["h2ping"]
    env = " ".join(args for st, kw, args in instructions() if kw == "ENV" and st == 1)
    admin = re.search(r"\bH2PING_ADMIN_LISTEN=(\S+)", env)
    assert admin, "the image must turn the admin endpoint on for its HEALTHCHECK"
    assert only("EXPOSE") == admin.group(1).rpartition(":")[2]
    assert "/healthz" in only("HEALTHCHECK")


def test_every_h2ping_variable_named_is_a_setting() -> None:
    known = {flag.env for flag in _FLAGS}
    for path in (DOCKERFILE, *DOCS):
        named = set(re.findall(r"\bH2PING_[A-Z_]+[A-Z]\b", path.read_text()))
        assert named - {"H2PING_FLAG"} <= known, (path.name, named - known)


def test_dockerignore_lets_the_copied_files_in() -> None:
    allowed = {ln[1:].rstrip("/") for ln in (ROOT / ".dockerignore").read_text().splitlines()
               if ln.startswith("!")}  # fmt: skip
    for _, keyword, args in instructions():
        if keyword == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert source.rstrip("/") in allowed, source


def healthcheck_argv() -> list[str]:
    args = only("HEALTHCHECK")
    argv = json.loads(args[args.index("CMD ") + 4 :])
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


async def run_healthcheck(admin: str) -> int:
    env = {**os.environ, "H2PING_ADMIN_LISTEN": admin}
    proc = await asyncio.create_subprocess_exec(
        *healthcheck_argv(), env=env, stderr=asyncio.subprocess.DEVNULL
    )
    return await asyncio.wait_for(proc.wait(), 15)


async def test_healthcheck_command_probes_the_admin_endpoint() -> None:
    async with running_proxy("https://127.0.0.1:9", admin_listen="127.0.0.1:0") as proxy:
        assert proxy.admin is not None
        port = proxy.admin.port
        assert await run_healthcheck(f"0.0.0.0:{port}") == 0
    assert await run_healthcheck(f"0.0.0.0:{port}") != 0  # nothing listens any more


def copy_build_context(dest: Path) -> None:
    """What the builder stage COPYs, to where it COPYs it (relative to its WORKDIR)."""
    for stage, keyword, args in instructions():
        if stage == 0 and keyword == "COPY":
            *sources, target = args.split()
            for source in sources:
                origin, where = ROOT / source, dest / target
                if origin.is_dir():
                    ignore = shutil.ignore_patterns("__pycache__")
                    shutil.copytree(origin, where, ignore=ignore, dirs_exist_ok=True)
                else:
                    where.mkdir(parents=True, exist_ok=True)
                    shutil.copy(origin, where / origin.name)


@pytest.mark.slow
def test_install_steps_work_in_a_fresh_venv(tmp_path: Path) -> None:
    src, venv = tmp_path / "src", tmp_path / "venv"
    src.mkdir()
    copy_build_context(src)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    for step in pip_steps():  # as the Dockerfile's RUN does: /bin/sh -c, in /src
        done = subprocess.run(
            ["/bin/sh", "-c", step], cwd=src, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{step}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for script in ("h2ping", "h2-ping-sidecar"):
        done = subprocess.run(
            [str(venv / "bin" / script), "--help"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"Usage: {script} -upstream URL"), done.stdout
    probe = (
        "import h2ping, h2ping.testing, importlib.metadata as m; print(h2ping.__file__); "
        "print(*[e.value for e in m.entry_points(group='pytest11')])"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    location, plugins = done.stdout.splitlines()
    assert location.startswith(str(venv)), location  # the wheel's copy, not the source tree
    assert "h2ping.pytest_plugin" in plugins.split()
