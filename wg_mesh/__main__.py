"""`python -m wg_mesh` and the `wg-mesh` command: the CLI lives in wg_mesh.cli."""

import sys

from wg_mesh.cli import main

if __name__ == "__main__":
    sys.exit(main())
