"""`python -m wg_mesh` and the `wg-mesh` command ([project.scripts]): the CLI lives in wg_mesh.cli."""

import sys

from wg_mesh.cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
