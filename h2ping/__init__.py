"""h2ping: an HTTP/1.1 to HTTP/2 forwarding proxy that keeps silent requests alive."""

__version__ = "0.1.0"  # first, so that modules imported below can read it

from .config import Config
from .proxy import Proxy
from .stats import Stats

__all__ = ["Config", "Proxy", "Stats", "__version__"]
