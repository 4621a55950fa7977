"""`sudo python3 -m wg_mesh.gateway.doctor` on a bare gateway (the same as `python -m wg_mesh doctor`)."""

import sys

from wg_mesh.gateway.doctor import main

sys.exit(main())
