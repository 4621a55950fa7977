"""Key material kept in Pulumi state: a site's WireGuard key pair, and the mesh's document signing key.

Both are 32 bytes from `pulumi_random.RandomBytes` (a real provider, so nothing of ours is pickled into state),
stable across `pulumi up` runs and replaced only when their epoch changes (the RandomBytes keepers):
- WireGuardKey: the private key, clamped the way `wg genkey` clamps; replaced by the site's `key_epoch`.
- SigningKey (delivery: live, one per Mesh): the Ed25519 seed that signs every site's peer document
  (wg_mesh.plan.signing); its verify key is pinned in every gateway's agent.json. Replaced by `signing_key_epoch`.
"""

from __future__ import annotations

import pulumi
import pulumi_random

from wg_mesh.plan import signing, wgkey

KEY_TYPE = "wg-mesh:index:WireGuardKey"
SIGNING_KEY_TYPE = "wg-mesh:index:SigningKey"
SIGNING_SEED_BYTES = 32  # an Ed25519 private key is a 32-byte seed (RFC 8032 section 5.1.5)


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
            # Protected when the key component is (given or inherited from its parent: `protect: true`, a protected
            # Mesh or site component, wg_mesh.component.kept): losing the key is a deliberate act.
            opts=pulumi.ResourceOptions(parent=self, protect=bool(self._protect)),
        )
        # Wrapped explicitly: the provider marks `base64` secret, but mocks (and any provider bug) would not.
        self.private_key = pulumi.Output.secret(random.base64.apply(wgkey.private_key_from_random))
        self.public_key = pulumi.Output.unsecret(self.private_key.apply(wgkey.public_key))
        self.register_outputs({"public_key": self.public_key})


def _checked_seed(random_base64: str) -> str:
    signing.seed_from_random(random_base64)  # ValueError for anything but 32 bytes of base64
    return random_base64


def _verify_key(seed: str) -> str:
    return signing.verify_key_b64(signing.seed_from_random(seed))


class SigningKey(pulumi.ComponentResource):
    """The mesh's Ed25519 document signing key. `seed` (base64 of the 32-byte seed, `signing.seed_from_random`) is
    always a secret; `verify_key` (base64 of the raw public key, what agent.json's `trust.signing_key` pins) is
    derived from it and public."""

    seed: pulumi.Output[str]
    verify_key: pulumi.Output[str]

    def __init__(self, name: str, epoch: int, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(SIGNING_KEY_TYPE, name, None, opts)
        random = pulumi_random.RandomBytes(
            f"{name}-random",
            length=SIGNING_SEED_BYTES,
            keepers={"signing_key_epoch": str(epoch)},
            # Protected when the component is (given, or inherited from its parent): a lost signing key means new
            # user data on every gateway.
            opts=pulumi.ResourceOptions(parent=self, protect=bool(self._protect)),
        )
        # Wrapped explicitly, like the WireGuard key: mocks (and any provider bug) would not mark `base64` secret.
        self.seed = pulumi.Output.secret(random.base64.apply(_checked_seed))
        self.verify_key = pulumi.Output.unsecret(self.seed.apply(_verify_key))
        self.register_outputs({"verify_key": self.verify_key})
