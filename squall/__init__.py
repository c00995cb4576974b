"""Squall: a real-time computation cluster in the style of JStorm."""

__version__ = "0.1.0"

#: The Apache Storm release whose Nimbus Thrift API Squall speaks (idl/storm.thrift is wire-identical to Storm
#: 1.x's; 1.2.4 is the last 1.x). ``storm version`` prints it as Storm does, for tools that read it.
STORM_VERSION = "1.2.4"
