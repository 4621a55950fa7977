"""`python -m bench COMMAND`: the commands and their flags are bench/cli.py's."""

from bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
