"""Other projects' formats read as Squall topologies: streamparse project directories.

Above :mod:`squall.api`, whose DSL it builds on (see docs/internals/index.md).
"""
