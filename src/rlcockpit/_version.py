"""The package version, importable without the package's convenience imports."""

__version__ = "0.1.0"
