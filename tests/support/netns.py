"""A network namespace joined to this one by a veth pair, for network-partition tests.

The namespace gets ``inner`` (``10.213.x.2``), this side ``outer`` (``10.213.x.1``) on the
other end of the pair; processes here bind ``outer`` to be reachable from inside, processes
started with ``prefix`` (``ip netns exec <name>``) run inside and bind ``inner``. ``cut``
blackholes, inside the namespace, every route back to this side (so no packet crosses in
either direction's conversation: TCP needs both), ``heal`` removes it. Nothing leaves the
pair: no routes or rules of this namespace change besides the veth's own subnet.

Requires root and iproute2; ``create_netns`` raises ``NetnsUnavailableError`` naming what
failed.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
from dataclasses import dataclass


class NetnsUnavailableError(RuntimeError):
    """Network namespaces cannot be created here (the message names the capability)."""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@dataclass
class NetNamespace:
    name: str
    outer_link: str
    outer: str  # this side's address on the pair
    inner: str  # the namespace's address
    is_cut: bool = False

    @property
    def prefix(self) -> tuple[str, ...]:
        """Prepend to a command to run it inside (``ip netns exec`` execs it: same pid)."""
        return ("ip", "netns", "exec", self.name)

    def cut(self) -> None:
        """No traffic between the namespace and this side from now on."""
        _ip("-n", self.name, "route", "add", "blackhole", f"{self.outer}/32")
        self.is_cut = True

    def heal(self) -> None:
        _ip("-n", self.name, "route", "del", "blackhole", f"{self.outer}/32")
        self.is_cut = False

    def delete(self) -> None:
        """Remove the pair and the namespace (processes inside must be gone first)."""
        for args in (("link", "del", self.outer_link), ("netns", "del", self.name)):
            # Already gone (deleting one end of a veth removes both).
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip(*args)


def create_netns(tag: str) -> NetNamespace:
    """A namespace and veth pair with names and a /30 subnet unique to this process.

    Raises:
        NetnsUnavailableError: not root, no ``ip`` command, or the kernel refused.
    """
    if os.geteuid() != 0:
        raise NetnsUnavailableError("network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)")
    block = random.randrange(1, 16_000)
    base = f"10.213.{block // 64}.{(block % 64) * 4}"
    prefix = base.rsplit(".", 1)[0]
    last = int(base.rsplit(".", 1)[1])
    ns = NetNamespace(
        name=f"tl-{tag}-{os.getpid()}-{block}",
        outer_link=f"tlo{block}",
        outer=f"{prefix}.{last + 1}",
        inner=f"{prefix}.{last + 2}",
    )
    inner_link = f"tli{block}"
    try:
        _ip("netns", "add", ns.name)
        _ip("link", "add", ns.outer_link, "type", "veth", "peer", "name", inner_link)
        _ip("link", "set", inner_link, "netns", ns.name)
        _ip("addr", "add", f"{ns.outer}/30", "dev", ns.outer_link)
        _ip("link", "set", ns.outer_link, "up")
        _ip("-n", ns.name, "addr", "add", f"{ns.inner}/30", "dev", inner_link)
        _ip("-n", ns.name, "link", "set", inner_link, "up")
        _ip("-n", ns.name, "link", "set", "lo", "up")
    except FileNotFoundError as e:
        raise NetnsUnavailableError(f"iproute2's ip command is missing: {e}") from e
    except subprocess.CalledProcessError as e:
        ns.delete()
        raise NetnsUnavailableError(
            f"cannot create a network namespace with a veth pair: {' '.join(e.cmd)} failed: "
            f"{e.stderr.strip()}"
        ) from e
    return ns
