"""The wg-mesh Pulumi program: the stack's `wg-mesh:mesh` config in, a WireGuard mesh out.

Thin on purpose, and the package used as any Pulumi program would use it (README, "Use it from your program"):
the stack file's `wg-mesh:mesh` is a `MeshArgs` as it is. Mesh validates it (every problem listed, before any
resource is declared); check a stack's config without Pulumi: `python -m wg_mesh validate --stack NAME`.
"""

import pulumi

from wg_mesh import Mesh
from wg_mesh.program import CONFIG_KEY, CONFIG_NAMESPACE, stack_outputs

wg_mesh = Mesh("mesh", pulumi.Config(CONFIG_NAMESPACE).require_object(CONFIG_KEY))

for output_name, value in stack_outputs(wg_mesh).items():
    pulumi.export(output_name, value)
