"""A site's WireGuard key pair, kept in Pulumi state.

The private key is 32 bytes from `pulumi_random.RandomBytes` (a real provider, so nothing of ours is
pickled into state), clamped the way `wg genkey` clamps. It is stable across `pulumi up` runs and is
replaced only when the site's `key_epoch` changes (the RandomBytes keepers).
"""

from __future__ import annotations

import pulumi
import pulumi_random

from wg_mesh import wgkey

KEY_TYPE = "wg-mesh:index:WireGuardKey"


class WireGuardKey(pulumi.ComponentResource):
    """`private_key` is always a secret; `public_key` is derived from it and is public."""

    private_key: pulumi.Output[str]
    public_key: pulumi.Output[str]

    def __init__(self, name: str, epoch: int, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(KEY_TYPE, name, None, opts)
        random = pulumi_random.RandomBytes(
            f"{name}-random",
            length=wgkey.KEY_LENGTH,
            keepers={"key_epoch": str(epoch)},
            # Protected when the key component is (`protect: true`): losing the key is a deliberate act.
            opts=pulumi.ResourceOptions(parent=self, protect=bool(opts and opts.protect)),
        )
        # Wrapped explicitly: the provider marks `base64` secret, but mocks (and any provider bug) would not.
        self.private_key = pulumi.Output.secret(random.base64.apply(wgkey.private_key_from_random))
        self.public_key = pulumi.Output.unsecret(self.private_key.apply(wgkey.public_key))
        self.register_outputs({"public_key": self.public_key})
