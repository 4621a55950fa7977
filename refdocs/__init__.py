"""The reference pages of the docs site, generated from the code: docs/reference/*.md.

    python -m refdocs           write the pages
    python -m refdocs --check   exit 1, naming the stale pages, when a committed page differs

Each page module renders one page from the code itself (the config model's field descriptions, the CLI's argparse
parsers, the public names' docstrings, the metrics and alert rules, the IAM policies a gateway gets, the resources
per cloud from the program run under mocks); `pages` lists
them. Nothing in wg_mesh/ imports this package.
"""
