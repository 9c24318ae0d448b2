"""The version, in one place: the package, the admin endpoint and the build read it."""

__version__ = "0.1.0"
