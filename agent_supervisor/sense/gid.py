"""``NCCL_IB_GID_INDEX`` of this node, resolved from its own GID table at each start.

The index of the RoCE v2 GID that carries the node's interconnect IPv4 address (as an
IPv4-mapped IPv6 GID, ``::ffff:a.b.c.d``) differs per node and drifts after a reboot or a
link event; a wrong one fails NCCL's init (``ibv_modify_qp`` errno 61, "unhandled system
error") or wedges the handshake after the model loaded (NVIDIA/nccl#1333;
MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark PR #11; tonyd2wild/...-2x-DGX-Spark PR #40).

Layout read (Linux RDMA sysfs, ``Documentation/ABI/stable/sysfs-class-infiniband``):
``/sys/class/infiniband/<hca>/ports/<port>/gids/<index>`` holds the GID as eight groups
of four hex digits; ``.../gid_attrs/types/<index>`` holds ``RoCE v2`` or
``IB/RoCE v1``; ``.../gid_attrs/ndevs/<index>`` the net device. An unreadable entry (the
kernel answers EINVAL for empty slots) is skipped. Parsing is pure (``match_gid``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SYSFS_INFINIBAND", "GidMatch", "match_gid", "resolve_gid_index"]

SYSFS_INFINIBAND = Path("/sys/class/infiniband")


@dataclass(frozen=True)
class GidMatch:
    """The index found (None: none), where, and a note an operator can act on."""

    index: int | None
    hca: str | None = None
    port: int | None = None
    netdev: str | None = None
    note: str = ""


def _gid_of(address: str) -> ipaddress.IPv6Address:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv4Address):
        return ipaddress.IPv6Address(f"::ffff:{ip}")
    return ip


def match_gid(address: str, entries: list[tuple[str, int, int, str, str, str | None]],
              hcas: tuple[str, ...] = ()) -> GidMatch:
    """The lowest RoCE v2 index whose GID is ``address`` among ``entries``
    ``(hca, port, index, gid text, type text, netdev)``; only HCAs in ``hcas`` when given.
    Raises ValueError when ``address`` is not an IP address."""
    want = _gid_of(address)
    seen = 0
    for hca, port, index, gid, kind, ndev in sorted(entries, key=lambda e: (e[0], e[1], e[2])):
        if hcas and hca not in hcas:
            continue
        seen += 1
        try:
            value = ipaddress.IPv6Address(gid.strip())
        except ValueError:
            continue
        if value == want and kind.strip().lower() == "roce v2":
            return GidMatch(index, hca, port, ndev, f"RoCE v2 GID of {address} on {hca} "
                            f"port {port} ({ndev or 'no netdev'})")
    where = f" on {', '.join(hcas)}" if hcas else ""
    return GidMatch(None, note=f"no RoCE v2 GID carries {address}{where} ({seen} GID "
                    "entries read): NCCL_IB_GID_INDEX left unset")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def resolve_gid_index(address: str, *, root: Path = SYSFS_INFINIBAND,
                      hcas: tuple[str, ...] = ()) -> GidMatch:
    """Read the GID tables under ``root`` and match ``address`` (``match_gid``). No RDMA
    device (no ``root``): index None with a note. Never raises for sysfs trouble."""
    if not root.is_dir():
        return GidMatch(None, note=f"no RDMA devices ({root} missing): NCCL_IB_GID_INDEX "
                        "left unset")
    entries = []
    for gid_file in root.glob("*/ports/*/gids/*"):
        port_dir = gid_file.parent.parent
        gid = _read(gid_file)
        kind = _read(port_dir / "gid_attrs" / "types" / gid_file.name)
        if gid is None or kind is None or not gid_file.name.isdigit() \
                or not port_dir.name.isdigit():
            continue
        entries.append((port_dir.parent.parent.name, int(port_dir.name), int(gid_file.name),
                        gid, kind, _read(port_dir / "gid_attrs" / "ndevs" / gid_file.name)))
    try:
        return match_gid(address, entries, hcas)
    except ValueError:
        return GidMatch(None, note=f"{address} is not an IP address: NCCL_IB_GID_INDEX "
                        "left unset")
