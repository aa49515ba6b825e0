"""Simulated hosts on one machine: network namespaces cabled to a private switch.

A :class:`Network` is a "switch" namespace holding a Linux bridge, and one
namespace per host, each joined to the bridge by a veth pair (``eth0`` in
the host, a port named after the host in the switch) with an address on a
private /24. Nothing is added to the root namespace: no interface, no
address, no route. The whole network is therefore invisible from outside
and two runs cannot clash, even on the same subnet; only the namespace
names (files under ``/run/netns``) are global, and they carry a prefix
unique to the run.

Taking a host's switch port down is pulling its cable: the host keeps its
address and its processes, but nothing reaches the other hosts.

Processes started in a host (:meth:`Network.spawn`) run under
``ip netns exec``, which execs the command, so the Popen's pid is the
process itself. :meth:`Network.destroy` kills every process still in the
namespaces (also those that left their session, such as job tasks) and
deletes the namespaces, which takes the veth pairs and the bridge with
them. It is safe to call on a half-built network and more than once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: Where iproute2 keeps named namespaces (one nsfs bind mount per name).
NETNS_DIR = Path("/run/netns")


class NetnsError(RuntimeError):
    """An ``ip`` command failed while building or changing the network."""


def ip(*args: str) -> str:
    """Run ``ip ARGS``; its stdout. NetnsError (with ip's message) when it fails."""
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=False)
    if proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be used here (None: they can).

    Creates and deletes a probe namespace, since being root is not enough
    inside a container without CAP_SYS_ADMIN.
    """
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command is missing (apt-get install iproute2)"
    probe = f"fxprobe-{uuid.uuid4().hex[:10]}"
    try:
        ip("netns", "add", probe)
    except (NetnsError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        ip("netns", "del", probe)
    except NetnsError as exc:
        return f"cannot delete a network namespace: {exc}"
    return None


def require() -> None:
    """Skip the test when namespaces are unavailable, but fail under CI when root.

    CI runs as root on machines where namespaces work, so there a failure
    to create one is a broken environment, not a reason to skip.
    """
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI") and os.geteuid() == 0:
        pytest.fail(f"{reason}, and CI is set (CI runs as root and must run this test)")
    pytest.skip(reason)


@dataclass(frozen=True)
class Host:
    """One simulated machine: a namespace with ``eth0`` at ``address``."""

    name: str
    netns: str
    address: str
    #: The host's port on the switch (in the switch namespace).
    port: str

    def netns_id(self) -> str:
        """What ``readlink /proc/self/ns/net`` prints inside this host.

        The nsfs file under /run/netns has the namespace's inode number, so
        a process can be proven to have run here, whatever it claims.
        """
        return f"net:[{os.stat(NETNS_DIR / self.netns).st_ino}]"


@dataclass
class Network:
    """A switch and hosts on ``10.213.<octet>.0/24``, names starting with ``prefix``."""

    prefix: str
    octet: int
    hosts: dict[str, Host] = field(default_factory=dict)
    _namespaces: list[str] = field(default_factory=list)
    _next_address: int = 1

    @classmethod
    def new(cls) -> Network:
        """A network with a fresh unique prefix; nothing is created yet."""
        tag = uuid.uuid4().hex[:8]
        # The subnet only has to be private: the network is isolated, so the
        # octet varies merely to make a run's addresses easy to tell apart.
        return cls(prefix=f"fxmh-{tag}", octet=1 + int(tag, 16) % 254)

    @property
    def switch(self) -> str:
        """The switch namespace's name."""
        return f"{self.prefix}-switch"

    def _add_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self._namespaces.append(name)  # recorded at once: destroy() must find it
        ip("-n", name, "link", "set", "lo", "up")

    def create(self) -> None:
        """Create the switch: a namespace holding bridge ``br0``."""
        self._add_namespace(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")

    def add_host(self, name: str) -> Host:
        """Create host ``name`` with the next free address, cabled to the switch."""
        netns = f"{self.prefix}-{name}"
        address = f"10.213.{self.octet}.{self._next_address}"
        self._next_address += 1
        port = f"p-{name}"[:15]  # interface names are at most 15 bytes
        self._add_namespace(netns)
        # Both ends are created straight in their namespaces: nothing ever
        # appears in the root namespace, where names could collide.
        ip("-n", self.switch, "link", "add", port, "type", "veth",
           "peer", "name", "eth0", "netns", netns)
        ip("-n", self.switch, "link", "set", port, "master", "br0")
        ip("-n", self.switch, "link", "set", port, "up")
        ip("-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", netns, "link", "set", "eth0", "up")
        host = Host(name, netns, address, port)
        self.hosts[name] = host
        return host

    def argv(self, host: Host, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host``."""
        return ["ip", "netns", "exec", host.netns, *argv]

    def spawn(self, host: Host, argv: Sequence[str], log: Path,
              env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``host`` in a session of its own, output appended to ``log``."""
        with open(log, "ab") as out:
            return subprocess.Popen(self.argv(host, argv), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=out, env=dict(env or os.environ),
                                    start_new_session=True)

    def run(self, host: Host, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in ``host`` to completion; its output as text."""
        return subprocess.run(self.argv(host, argv), capture_output=True, text=True,
                              env=dict(env or os.environ), timeout=timeout, check=False)

    def set_cable(self, host: Host, plugged: bool) -> None:
        """Plug or pull ``host``'s cable (its switch port up or down)."""
        ip("-n", self.switch, "link", "set", host.port, "up" if plugged else "down")

    def pids(self, host: Host) -> list[int]:
        """Every process running in ``host``'s namespace."""
        try:
            out = ip("netns", "pids", host.netns)
        except NetnsError:
            return []
        return [int(word) for word in out.split()]

    def destroy(self) -> None:
        """Kill every process in the namespaces, then delete them (veths and bridge go too)."""
        for name in self._namespaces:
            try:
                pids = ip("netns", "pids", name).split()
            except NetnsError:
                continue
            # Only our own processes can be in namespaces we created.
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for name in self._namespaces:
            while time.monotonic() < deadline:
                try:
                    if not ip("netns", "pids", name).split():
                        break
                except NetnsError:
                    break
                time.sleep(0.05)
        errors = []
        for name in reversed(self._namespaces):
            try:
                ip("netns", "del", name)
            except NetnsError as exc:
                if (NETNS_DIR / name).exists():
                    errors.append(str(exc))
        self._namespaces.clear()
        self.hosts.clear()
        if errors:
            raise NetnsError("; ".join(errors))
