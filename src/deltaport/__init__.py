"""deltaport: Delta Sharing, whole, in Python."""

__version__ = "0.1.0"
