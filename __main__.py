"""The wg-mesh Pulumi program: the stack's `wg-mesh:mesh` config in, a WireGuard mesh out.

Thin on purpose. Validation is in mesh/config.py, every decision in mesh/topology.py, the text
artifacts in mesh/render.py, the resources in mesh/aws.py, mesh/gcp.py, mesh/static.py and
mesh/mesh.py. Check a stack's config without Pulumi: `python -m mesh validate --stack NAME`.
"""

import pulumi

from mesh.mesh import Mesh
from mesh.program import CONFIG_KEY, CONFIG_NAMESPACE, load, stack_outputs

# An invalid config stops here, listing every problem, before any resource is declared.
mesh_config = load(pulumi.Config(CONFIG_NAMESPACE).require_object(CONFIG_KEY))

wg_mesh = Mesh("mesh", mesh_config)

for output_name, value in stack_outputs(wg_mesh).items():
    pulumi.export(output_name, value)
