"""`python -m tinygrad_block <command>`: the command line of cli.py; `--help` lists the commands."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
