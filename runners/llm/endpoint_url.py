"""What an endpoint's base URL says, for every client of an OpenAI-compatible endpoint (the model
backend, the embedding endpoint): whether it is on this machine (`is_loopback`: such an endpoint needs no
key) and the form of it that is safe to show (`public_url`: no credentials, no query string)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit


def public_url(url: str) -> str:
    """The base URL without credentials or query string, safe to log."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def is_loopback(url: str) -> bool:
    """Whether the URL's host is this machine (localhost, a loopback address, or 0.0.0.0)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback or host == "0.0.0.0"
    except ValueError:
        return False
