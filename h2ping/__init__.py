"""h2ping: an HTTP/1.1 to HTTP/2 forwarding proxy that keeps silent requests alive."""

from ._version import __version__
from .config import Config
from .process.proxy import Proxy
from .stats import Stats

__all__ = ["Config", "Proxy", "Stats", "__version__"]
