"""tinygpt: a small decoder-only language-model lab."""

__version__ = "0.1.0"
