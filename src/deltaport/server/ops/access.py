"""IP access lists: which client addresses a recipient may connect from, and who the client is
behind trusted proxies.

- :class:`IpAllowList` holds IPv4 and IPv6 addresses and CIDR blocks. Empty means from anywhere.
  A client address that is an IPv4-mapped IPv6 address (``::ffff:10.1.2.3``, as a dual-stack
  socket reports IPv4 peers) is matched as the IPv4 address it maps; a mapped entry likewise.
- :func:`client_ip` is the socket peer, except when the peer is a trusted proxy: then the right-most
  ``X-Forwarded-For`` hop that is not itself a trusted proxy (hops to its left were written by the
  client and prove nothing). A malformed hop where the client should be gives no address.
- :class:`RecipientAllowLists` finds a recipient's list by name in the served config and refuses
  (403, ``PERMISSION_DENIED``) a client outside it. An unknown client address is outside every
  non-empty list, and a list that does not parse refuses everyone: access lists fail closed.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union

from deltaport.errors import InvalidParameter, PermissionDenied

log = logging.getLogger("deltaport.server")

Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_EXAMPLES = "203.0.113.7, 10.0.0.0/8, 2001:db8::/32"


def parse_address(text: str) -> Address | None:
    """``text`` as an IP address (an IPv4-mapped IPv6 address as its IPv4 address); None when it is
    not one."""
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _network(entry: Any) -> Network:
    text = str(entry).strip()
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        hint = ""
        if "host bits set" in str(exc):
            hint = f" (its address has bits set beyond the /{text.rsplit('/', 1)[-1]} prefix: did you mean "
            hint += f"{ipaddress.ip_network(text, strict=False)}?)"
        raise InvalidParameter(
            f"{str(entry)!r} is not an IP address or CIDR block{hint}; write addresses and blocks like {_EXAMPLES}"
        ) from None
    if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= 96 and network.subnet_of(_MAPPED):
        mapped = int(network.network_address) & 0xFFFFFFFF
        return ipaddress.IPv4Network((mapped, network.prefixlen - 96))
    return network


@dataclass(frozen=True)
class IpAllowList:
    """IPv4 and IPv6 networks (a single address is a /32 or /128 network). Built by :meth:`parse`."""

    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> IpAllowList:
        """The list of ``entries`` (addresses and CIDR blocks); InvalidParameter naming the first
        entry that is neither."""
        return cls(tuple(_network(entry) for entry in entries))

    def allows(self, ip: str | None) -> bool:
        """Whether a client at ``ip`` may connect: always when the list is empty; never when the
        address is unknown or not an IP address (and the list is not empty)."""
        return not self.networks or self.contains(ip)

    def contains(self, ip: str | Address | None) -> bool:
        """Whether ``ip`` is in one of the networks (False for an empty list)."""
        if not self.networks or ip is None:
            return False
        address = parse_address(ip) if isinstance(ip, str) else ip
        return address is not None and any(address in network for network in self.networks)


def _hop(text: str) -> Address | None:
    """One ``X-Forwarded-For`` hop as an address: ``1.2.3.4``, ``1.2.3.4:80``, ``2001:db8::1`` or
    ``[2001:db8::1]:80``; None when it is none of these (``unknown``, an obfuscated name)."""
    hop = text.strip()
    if hop.startswith("["):
        hop = hop[1:].partition("]")[0]
    elif hop.count(":") == 1:
        hop = hop.partition(":")[0]
    return parse_address(hop)


def client_ip(scope: dict[str, Any], trusted_proxies: IpAllowList) -> str | None:
    """The client's address: the socket peer, or, when the peer is one of ``trusted_proxies``, the
    right-most ``X-Forwarded-For`` hop that is not a trusted proxy (the left-most hop when all are;
    the peer when there is no such header). None when the peer is unknown or the hop where the
    client should be is malformed."""
    peer = scope.get("client")
    host = peer[0] if peer else None
    if host is None or not trusted_proxies.contains(host):
        return host
    hops: list[str] = []
    for name, value in scope["headers"]:
        if name == b"x-forwarded-for":
            hops.extend(value.decode("latin-1").split(","))
    address: Address | None = None
    for hop in reversed(hops):
        address = _hop(hop)
        if address is None or not trusted_proxies.contains(address):
            break
    return host if not hops else None if address is None else str(address)


class _Recipient(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def allowed_ip_addresses(self) -> Sequence[str]: ...


class ServedRecipients(Protocol):
    """What the access lists read of the served config: its recipients."""

    @property
    def recipients(self) -> Sequence[_Recipient]: ...


class RecipientAllowLists:
    """The IP access list of each recipient of the served config, by recipient name.

    Parsed once per config object: the cache is keyed by the config's identity and holds the config
    itself (so its id cannot be reused while cached); a new config (the catalog reloaded) is parsed
    afresh and the old one dropped. A list that does not parse refuses every client (logged once
    per config, with the entry at fault)."""

    def __init__(self) -> None:
        self._cached: dict[int, tuple[ServedRecipients, dict[str, IpAllowList | InvalidParameter]]] = {}

    def check(self, config: ServedRecipients, recipient: str, ip: str | None) -> None:
        """Refuse (PermissionDenied) ``recipient`` connecting from ``ip`` when its list does not
        allow it; principals that are no recipient of ``config`` have no list."""
        found = self._lists(config).get(recipient)
        if found is None:
            return
        if isinstance(found, InvalidParameter):
            raise PermissionDenied(
                "Access denied: this recipient's IP access list is not valid. Ask the data provider to correct it."
            )
        if found.allows(ip):
            return
        if ip is None:
            raise PermissionDenied(
                "Access denied: the client's IP address could not be determined, and this recipient may only "
                "connect from the addresses on its IP access list."
            )
        raise PermissionDenied(
            f"Access denied: requests from IP address {ip} are not allowed for this recipient. Ask the data "
            f"provider to add {ip} to the recipient's IP access list."
        )

    def _lists(self, config: ServedRecipients) -> dict[str, IpAllowList | InvalidParameter]:
        cached = self._cached.get(id(config))
        if cached is not None and cached[0] is config:
            return cached[1]
        lists: dict[str, IpAllowList | InvalidParameter] = {}
        for recipient in config.recipients:
            if recipient.allowed_ip_addresses:
                try:
                    lists[recipient.name] = IpAllowList.parse(recipient.allowed_ip_addresses)
                except InvalidParameter as exc:
                    log.error("recipient %r: %s; it is refused until this is corrected", recipient.name, exc)
                    lists[recipient.name] = exc
        self._cached = {id(config): (config, lists)}
        return lists
