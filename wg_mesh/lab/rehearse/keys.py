"""The lab's keys across a change: one WireGuard key per site and `key_epoch`, one signing seed per
`signing_key_epoch`, so that what the change keeps is the same key in both states (a renamed site's too: Pulumi's
aliases keep its key) and what it rotates is a new one. The private keys stay in memory and the gateways' files."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from wg_mesh.config import MeshConfig
from wg_mesh.lab.fabric.plan import SIGNING_SEED_BYTES, LabKeys
from wg_mesh.plan import wgkey


@dataclass
class KeyRing:
    _private: dict[tuple[str, int], str] = field(default_factory=dict, repr=False)
    _signing: dict[int, bytes] = field(default_factory=dict, repr=False)

    def keys(self, cfg: MeshConfig, identity: dict[str, str] | None = None) -> LabKeys:
        """The config's keys, each site's under its name in `cfg`; `identity` maps a name to the site it is (a renamed
        site's new name to its old one), so that both states' keys of one site and epoch are one key."""
        identity = identity or {}
        private = {}
        for site in cfg.sites:
            key = (identity.get(site.name, site.name), site.key_epoch)
            if key not in self._private:
                self._private[key] = wgkey.generate_private_key()
            private[site.name] = self._private[key]
        if cfg.signing_key_epoch not in self._signing:
            self._signing[cfg.signing_key_epoch] = secrets.token_bytes(SIGNING_SEED_BYTES)
        public = {name: wgkey.public_key(key) for name, key in private.items()}
        return LabKeys(private=private, public=public, signing=self._signing[cfg.signing_key_epoch])
