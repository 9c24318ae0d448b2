"""``python -m h2ping.http2.engine``: whether each fast path holds with the
installed h2 and hpack (each path taken, or why not); exits 1 when one is off."""

from .fastpaths import PROBES, check, versions


def main() -> int:
    failures = check()
    for name in PROBES:
        print(f"{name}: {'taken' if name not in failures else 'off: ' + failures[name]}")
    print(versions())
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
