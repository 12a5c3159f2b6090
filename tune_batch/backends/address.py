"""Which Ray cluster a search or a probe talks to, where that address came from, and a refusal
before anything is written when nothing answers there."""

from __future__ import annotations

import os
import socket

from tune_batch.config import Config
from tune_batch.errors import ConfigError, UserError


def address_origin(address: str | None) -> str:
    """Where a cluster address came from, as the user wrote it: the RAY_ADDRESS environment
    variable (read when neither --address nor search.address gives one), else the command line
    or the config."""
    return "RAY_ADDRESS" if address and address == os.environ.get("RAY_ADDRESS") else "--address"


def ray_address(config: Config, address: str | None) -> str | None:
    """The Ray cluster the trials run on: ``--address``, else search.address, else (search.backend
    ray) the RAY_ADDRESS environment variable, as ``ray.init()`` reads it (a cluster's jobs and pods
    have it set: the search crashed in ray.init there); None: a local instance."""
    if address or config.search.address or config.search.backend != "ray":
        return address or config.search.address
    return os.environ.get("RAY_ADDRESS") or None


def check_address(address: str | None, timeout_s: float = 5.0) -> None:
    """Refuse, before anything is written, a Ray address nothing answers at (``host:port`` or
    ``ray://host:port``; ``auto`` is left to Ray): Ray itself retries for minutes."""
    if not address or address == "auto":
        return
    name = address_origin(address)
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{name} {address!r}: expected 'auto', 'host:port' or 'ray://host:port'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        unset = "; or unset RAY_ADDRESS for a local instance" if name == "RAY_ADDRESS" else ""
        raise UserError(f"{name} {address!r}: nothing answers at {host}:{port} ({e.strerror or e}); start Ray "
                        f"there (ray start --head) or check the address{unset}") from e
