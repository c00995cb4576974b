"""Test hosts in Linux network namespaces (``ip netns`` + veth, from Debian's iproute2), on one bridge.

The bridge lives in this process's namespace with the first address of the subnet, so ZooKeeper, nimbus and
the test itself (bound to that address) are one "host" that every namespace reaches; each namespace is another
host with an address of its own. Cutting a host's veth at the bridge partitions it from everything; raising it
again heals the partition. Every interface and namespace has a random prefix and is removed on exit.

Example::

    with HostNetwork(["a", "b"]) as net:
        net.address("a")          # "10.231.0.2"
        net.prefix("a")           # ("ip", "netns", "exec", "sq3f1a-a"): run a command on host a
        net.partition("a"); net.heal("a")
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Sequence
from types import TracebackType

SUBNET = "10.231.0"


class NamespacesRefused(RuntimeError):
    """The kernel or our privileges refuse network namespaces; the text is ``ip``'s own error."""


def _ip(*argv: str) -> None:
    result = subprocess.run(["ip", *argv], capture_output=True, text=True)
    if result.returncode != 0:
        raise NamespacesRefused(f"`ip {' '.join(argv)}` failed: {result.stderr.strip() or result.returncode}")


class HostNetwork:
    """A bridge at ``<SUBNET>.1`` and one namespace per name at ``<SUBNET>.2``, ``.3``, …"""

    def __init__(self, names: Sequence[str]) -> None:
        self._tag = f"sq{secrets.token_hex(2)}"
        self.names = list(names)
        self.bridge = f"{self._tag}br"
        self.gateway = f"{SUBNET}.1"
        self._done: list[tuple[str, ...]] = []  # undo commands, run in reverse

    def __enter__(self) -> "HostNetwork":
        if shutil.which("ip") is None:
            raise NamespacesRefused("no `ip` command: install iproute2 (deploy/install-system-deps.sh --for-tests)")
        try:
            self._do(("link", "add", self.bridge, "type", "bridge"), ("link", "del", self.bridge))
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, name in enumerate(self.names):
                ns, outside = self.namespace(name), self._veth(name)
                self._do(("netns", "add", ns), ("netns", "del", ns))
                self._do(("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns),
                         ("link", "del", outside))
                _ip("link", "set", outside, "master", self.bridge)
                _ip("link", "set", outside, "up")
                _ip("-n", ns, "addr", "add", f"{SUBNET}.{i + 2}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        while self._done:
            subprocess.run(["ip", *self._done.pop()], capture_output=True)

    def namespace(self, name: str) -> str:
        return f"{self._tag}-{name}"

    def address(self, name: str) -> str:
        return f"{SUBNET}.{self.names.index(name) + 2}"

    def prefix(self, name: str) -> tuple[str, ...]:
        """What a command runs under to run on host ``name``."""
        return ("ip", "netns", "exec", self.namespace(name))

    def partition(self, name: str) -> None:
        """Cut host ``name`` off: its link to the bridge goes down (packets are dropped, not refused)."""
        _ip("link", "set", self._veth(name), "down")

    def heal(self, name: str) -> None:
        _ip("link", "set", self._veth(name), "up")

    def _veth(self, name: str) -> str:
        return f"{self._tag}v{self.names.index(name)}"

    def _do(self, argv: tuple[str, ...], undo: tuple[str, ...]) -> None:
        _ip(*argv)
        self._done.append(undo)
