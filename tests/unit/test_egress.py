"""Where upstream connections go out (h2ping/egress.py): the proxy URL, NO_PROXY as
curl reads it, and ``-proxy`` none / env / URL."""

from __future__ import annotations

import pytest

from h2ping.config import Config, ConfigError, parse_upstream
from h2ping.egress import NoProxy, ProxySetting, ProxyURL, parse_proxy_url
from h2ping.flags import SettingError, parse_command_line


def test_a_proxy_url_and_its_credentials() -> None:
    proxy = parse_proxy_url("http://us%40er:p%3Ass@proxy.corp:3128/")
    assert (proxy.host, proxy.port) == ("proxy.corp", 3128)
    assert (proxy.username, proxy.password) == ("us@er", "p:ss")
    assert proxy.authorization == b"Basic dXNAZXI6cDpzcw=="  # base64("us@er:p:ss")
    assert str(proxy) == repr(proxy).removeprefix("ProxyURL(").rstrip(")")
    assert str(proxy) == "http://***@proxy.corp:3128"
    assert "p:ss" not in repr(proxy) and "us@er" not in repr(proxy)
    assert parse_proxy_url("proxy.corp:3128") == ProxyURL("proxy.corp", 3128)  # as curl
    assert parse_proxy_url("http://proxy.corp").port == 80
    assert parse_proxy_url("http://[::1]:3128").address == "[::1]:3128"
    assert parse_proxy_url("http://user@p:1").authorization == b"Basic dXNlcjo="  # "user:"
    assert parse_proxy_url("http://p:1").authorization is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("https://user:hunter2@proxy:3128", "a https:// proxy is not supported"),
        ("socks5://user:hunter2@proxy:1080", "a socks5:// proxy is not supported"),
        ("http://user:hunter2@:3128", "needs a host"),
        ("http://user:hunter2@proxy:0", "other than 0"),
        ("http://user:hunter2@proxy:3128/path", "with no path"),
        ("http://user:hunter2@proxy:99999", "not a proxy URL (Port out of range"),
    ],
)
def test_a_proxy_url_h2ping_cannot_use_is_refused_without_its_password(
    text: str, words: str
) -> None:
    with pytest.raises(ValueError) as caught:
        parse_proxy_url(text)
    assert words in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "direct"),
    [
        ("", "api.example.com", 443, False),
        ("*", "api.example.com", 443, True),
        (" * ", "10.0.0.1", 8443, True),
        ("example.com", "example.com", 443, True),
        ("example.com", "api.example.com", 443, True),
        ("example.com", "badexample.com", 443, False),  # a suffix, at a dot only
        (".example.com", "api.example.com", 443, True),
        (".example.com", "example.com", 443, True),  # curl: the domain too
        ("*.example.com", "api.example.com", 443, True),
        ("EXAMPLE.com.", "Api.Example.COM", 443, True),
        ("other.org, example.com", "a.example.com", 443, True),
        ("other.org,,  ,", "a.example.com", 443, False),
        ("example.com:8443", "api.example.com", 8443, True),
        ("example.com:8443", "api.example.com", 443, False),
        ("127.0.0.1", "127.0.0.1", 443, True),
        ("127.0.0.1", "127.0.0.2", 443, False),
        ("127.0.0.1:8443", "127.0.0.1", 443, False),
        ("10.0.0.0/8", "10.20.30.40", 443, True),
        ("10.0.0.0/8", "11.0.0.1", 443, False),
        ("10.0.0.0/8", "ten.example", 443, False),  # no name is resolved to match
        ("::1", "::1", 443, True),
        ("[::1]", "::1", 443, True),
        ("[::1]:8443", "::1", 8443, True),
        ("[::1]:8443", "::1", 443, False),
        ("fd00::/8", "fd12::5", 443, True),
        ("localhost", "localhost", 443, True),
        ("localhost", "127.0.0.1", 443, False),  # as curl: names and addresses apart
    ],
)
def test_no_proxy_as_curl_reads_it(no_proxy: str, host: str, port: int, direct: bool) -> None:
    assert NoProxy.parse(no_proxy).matches(host, port) is direct


ENV = {
    "HTTPS_PROXY": "http://upper:3128",
    "https_proxy": "http://lower:3128",
    "http_proxy": "http://plain:3128",
    "ALL_PROXY": "http://all:3128",
    "NO_PROXY": ".internal",
}


def route(setting: ProxySetting, url: str) -> ProxyURL | None:
    upstream = parse_upstream(url)
    return setting.route(upstream.scheme, upstream.host, upstream.port)


def test_env_reads_the_variables_as_curl_and_httpx_do() -> None:
    env = ProxySetting.read("env", ENV)
    assert route(env, "https://api.example.com") == ProxyURL("lower", 3128)  # lowercase first
    assert route(env, "http://api.example.com") == ProxyURL("plain", 3128)  # h2c: http_proxy
    assert route(env, "https://api.internal") is None
    only_upper = ProxySetting.read("env", {"HTTPS_PROXY": "http://upper:3128"})
    assert route(only_upper, "https://api.example.com") == ProxyURL("upper", 3128)
    fallback = ProxySetting.read("env", {"ALL_PROXY": "http://all:3128"})
    assert route(fallback, "https://api.example.com") == ProxyURL("all", 3128)
    lower_no = ProxySetting.read("env", {**ENV, "no_proxy": "example.com"})
    assert route(lower_no, "https://api.example.com") is None
    assert route(ProxySetting.read("env", {}), "https://api.example.com") is None
    assert route(ProxySetting.read("env", {"HTTPS_PROXY": "  "}), "https://a.b") is None


def test_none_and_a_url_ignore_the_environment() -> None:
    for word in ("none", "NONE", "direct", ""):
        assert ProxySetting.read(word, ENV) == ProxySetting()
        assert route(ProxySetting.read(word, ENV), "https://api.example.com") is None
    explicit = ProxySetting.read("http://p:1", ENV)
    assert route(explicit, "https://api.internal") == ProxyURL("p", 1)  # no NO_PROXY for it
    assert str(explicit) == "http://p:1" and str(ProxySetting.read("env", ENV)) == "env"


def test_a_variable_that_holds_no_usable_proxy_is_refused_when_it_would_be_used() -> None:
    env = ProxySetting.read("env", {"HTTPS_PROXY": "socks5://u:hunter2@s:1080", "NO_PROXY": "x"})
    with pytest.raises(ValueError, match=r"^HTTPS_PROXY: a socks5:// proxy is not supported"):
        route(env, "https://api.example.com")
    assert route(env, "https://x") is None  # NO_PROXY: never looked at
    config = Config(upstream=parse_upstream("https://api.example.com"), proxy=env)
    with pytest.raises(ConfigError, match=r"^proxy: HTTPS_PROXY: a socks5://"):
        config.upstream_proxy  # noqa: B018


def test_the_command_line_takes_proxy_from_flag_and_variable() -> None:
    up = ["-upstream", "https://api.example.com"]
    config = parse_command_line([*up, "-proxy", "http://u:p@proxy:3128"], {}).config
    assert config.upstream_proxy == ProxyURL("proxy", 3128, "u", "p")
    config = parse_command_line(up, {"H2PING_PROXY": "env", "HTTPS_PROXY": "http://e:1"}).config
    assert config.upstream_proxy == ProxyURL("e", 1)
    config = parse_command_line(up, {"HTTPS_PROXY": "http://e:1"}).config
    assert config.upstream_proxy is None  # the environment only when asked
    with pytest.raises(SettingError) as caught:
        parse_command_line([*up, "-proxy", "https://u:hunter2@p:1"], {})
    assert str(caught.value).startswith("-proxy: a https:// proxy is not supported")
    assert "hunter2" not in str(caught.value)
    with pytest.raises(SettingError) as caught:
        parse_command_line(up, {"H2PING_PROXY": "env", "https_proxy": "ftp://p:1"})
    assert str(caught.value).startswith("H2PING_PROXY: https_proxy: a ftp:// proxy")


def test_the_embedding_api_takes_proxy_as_text_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from h2ping import Proxy

    made = Proxy(upstream="https://api.example.com", proxy="http://u:p@proxy:3128")
    assert made.config.upstream_proxy == ProxyURL("proxy", 3128, "u", "p")
    beside = Proxy(made.config, proxy="none")
    assert beside.config.upstream_proxy is None
    monkeypatch.setenv("https_proxy", "socks5://u:hunter2@s:1080")
    with pytest.raises(ConfigError) as caught:
        Proxy(upstream="https://api.example.com", proxy="env")  # refused now, not at a dial
    assert str(caught.value).startswith("proxy: https_proxy: a socks5:// proxy")
    assert "hunter2" not in str(caught.value)
