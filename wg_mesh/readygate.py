"""`python -m wg_mesh.readygate [gcp]`: the readiness gates' entry, under the module path their commands carry.

Each gate is a pulumi-command `local.Command` whose `create` is this command line (wg_mesh.aws.machine.GATE_COMMAND,
wg_mesh.gcp.instance): a new path would update every gate Command of every stack in place, so the path stays. The
gates themselves are wg_mesh/tools/readygate.py (AWS) and wg_mesh/tools/gcpgate.py (GCP)."""

import sys

from wg_mesh.tools.readygate import main

if __name__ == "__main__":
    sys.exit(main())
