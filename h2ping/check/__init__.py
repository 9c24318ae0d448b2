"""``h2ping check -upstream URL``: can h2ping use this endpoint, and what does it
offer? The command and its report (:mod:`.command`), the steps it takes and what
each tells (:mod:`.probe`), and its one connection (:mod:`.connection`): the
proxy's own, dialled as the proxy dials. Only the CLI imports this package."""

from .command import main

__all__ = ["main"]
