"""`python -m refdocs`: see refdocs.pages.main."""

import sys

from refdocs.pages import main

sys.exit(main())
