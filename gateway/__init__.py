"""The polyglot broker gateway."""

__version__ = "0.1.0"
