"""The pytest plugin that installing h2ping registers: its entry point, its fixture, and
the example tests of docs/testing.md run in a fresh pytest process as a user's project
would."""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path

import aiohttp
import pytest

from h2ping import Proxy
from h2ping.pytest_plugin import ProxyFactory
from h2ping.testing import ScriptedUpstream

from ..conftest import assert_not_accepting

pytest_plugins = ["pytester"]

TESTING = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def doc_examples() -> list[str]:
    """The example tests of docs/testing.md: the python blocks that use the fixture."""
    blocks = re.findall(r"```python\n(.*?)```", TESTING.read_text(), re.DOTALL)
    examples = [b for b in blocks if "h2ping_proxy_factory" in b and "def test_" in b]
    assert examples, "no example test in docs/testing.md"
    return examples


def doc_pytest_config() -> str:
    """The pytest configuration docs/testing.md asks a user's project to have."""
    blocks = re.findall(r"```toml\n(.*?)```", TESTING.read_text(), re.DOTALL)
    [config] = [b for b in blocks if "[tool.pytest.ini_options]" in b]
    return config


def test_entry_point_is_registered() -> None:
    [entry] = [ep for ep in entry_points(group="pytest11") if ep.name == "h2ping"]
    assert entry.value == "h2ping.pytest_plugin"
    assert callable(entry.load().h2ping_proxy_factory)


def test_doc_examples_pass_in_a_users_project(pytester: pytest.Pytester) -> None:
    examples = doc_examples()
    pytester.makepyprojecttoml(doc_pytest_config())
    pytester.makepyfile(**{f"test_doc_example_{i}": text for i, text in enumerate(examples)})
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=len(examples), warnings=0)
    output = "\n".join(result.outlines + result.errlines)
    assert "Warning" not in output, output


def test_the_fixture_comes_from_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_doc_example=doc_examples()[0])
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:h2ping")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'h2ping_proxy_factory' not found*"])


async def test_factory_runs_and_stops_a_proxy(
    h2ping_proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    async with ScriptedUpstream() as upstream:
        async with h2ping_proxy_factory(upstream, name="in-test") as proxy:
            assert isinstance(proxy, Proxy)
            assert proxy.config.name == "in-test"
            assert proxy.url == f"http://127.0.0.1:{proxy.port}"
            async with session.put(f"{proxy.url}/echo", data=b"abc") as resp:
                assert resp.status == 200
                assert await resp.read() == b"abc"
                assert resp.headers["x-echo-method"] == "PUT"
            assert proxy.stats.requests == 1
        port = proxy.port
        await assert_not_accepting(port, "the proxy after its block ended")
