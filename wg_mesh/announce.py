"""Announced key rotation, the program's side: when a site's current key becomes valid (its `key_at`).

A site's key_at is the moment its `key_epoch` last changed (a stamp, wg_mesh.tools.stamp, keyed on the epoch: the time
on the deployer's machine when `pulumi up` created the new key, kept in state) plus the mesh's `rotation_lead_seconds`.
Its own document and every peer's entry for it carry that moment; each agent keeps the key it runs until then and
switches at it (wg_mesh.gateway.rotation), so every party changes keys at the same moment. A stack that already
exists gets its stamps on the next `pulumi up`: a key_at in the near future for keys every agent already runs, which
changes nothing on any gateway.
"""

from __future__ import annotations

import pulumi

from wg_mesh.tools import stamp


def key_at(name: str, key_epoch: int, lead_seconds: int, parent: pulumi.Resource) -> pulumi.Output[int]:
    """`<name>` is the stamp's resource name; the moment the site's key with this epoch becomes valid."""
    created = stamp.stamp(name, [str(key_epoch)], pulumi.ResourceOptions(parent=parent))
    return created.apply(lambda at: at + lead_seconds)
