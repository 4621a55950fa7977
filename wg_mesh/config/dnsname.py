"""A static site's `endpoint` given as a DNS name (issue 24): what the config accepts as one, and the re-resolve
interval.

A name is a fully qualified host name (RFC 1123 section 2.1, RFC 1035 section 2.3.4): two labels or more, each 1-63
letters, digits and hyphens, not starting or ending with a hyphen, 253 characters at most (without the optional
final dot, which is dropped); stored lower-case (DNS compares names case-insensitively). An all-numeric last label
is refused: no top-level domain is numeric (RFC 3696 section 2), and `10.0.0.300` or `1.2.3` is a mistyped address,
not a name. No port (`:51820`: every gateway listens on the mesh's `listen_port`), no scheme, no path, no space.

Pure; the gateway's agent checks every name of a document again with its own standard-library copy of these rules
(wg_mesh.gateway.reresolve.name_problem; tests hold the two to the same verdicts).
"""

from __future__ import annotations

import re

MAX_NAME = 253  # RFC 1035: 255 octets on the wire, 253 characters written out
MAX_LABEL = 63
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# Every gateway that peers with a DNS-named site asks its resolver this often: wireguard-tools' contrib
# reresolve-dns.sh is run every 30 s by its timer, and the lab runs 2 s; below 2 s a resolver without a cache would
# get a query per peer per second per gateway, above an hour a moved site waits too long.
DEFAULT_RERESOLVE_SECONDS = 30
MIN_RERESOLVE_SECONDS, MAX_RERESOLVE_SECONDS = 2, 3600


def name_problem(text: str) -> str | None:
    """Why `text` (already lower-case, no final dot) is not a DNS name a site can have, or None."""
    if len(text) > MAX_NAME:
        return f"a DNS name has at most {MAX_NAME} characters (this one {len(text)})"
    if "://" in text:
        return "a URL: write the host name alone (e.g. vpn.example.com)"
    bad = next((ch for ch in text if not (ch.isascii() and (ch.isalnum() or ch in ".-"))), None)
    if bad is not None:
        what = "a port: every gateway listens on listen_port" if bad == ":" else repr(bad)
        return f"a DNS name has letters, digits, '-' and '.' only, not {what}"
    labels = text.split(".")
    if len(labels) < 2:
        return "a single label is not a fully qualified name (e.g. vpn.example.com)"
    for label in labels:
        if not label:
            return "an empty label ('..', or a leading dot)"
        if len(label) > MAX_LABEL:
            return f"a label has at most {MAX_LABEL} characters"
        if not _LABEL.fullmatch(label):
            return f"the label {label!r} starts or ends with '-'"
    if labels[-1].isdigit():
        return "looks like an IPv4 address but is not one (a name's last label is never numeric)"
    return None


def normalized(text: str) -> str:
    """The form the config keeps: lower-case, without the final dot of an absolute name."""
    lower = text.lower()
    return lower[:-1] if lower.endswith(".") and not lower.endswith("..") else lower
