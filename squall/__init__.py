"""Squall: a real-time computation cluster in the style of JStorm."""

__version__ = "0.1.0"
