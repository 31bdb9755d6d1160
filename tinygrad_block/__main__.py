"""Command line: `python -m tinygrad_block <command>`; `--help` lists the commands."""
from __future__ import annotations

import argparse
import sys

from . import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tinygrad_block",
                                     description="Learn how a transformer block computes by running it.")
    commands = parser.add_subparsers(dest="command", metavar="<command>")
    tour = commands.add_parser("tour", help="the tiny block forward and backward: autograd vs hand-derived vs "
                                            "finite differences, its FLOPs and its graphs")
    tour.add_argument("--out-dir", default="tinygrad_block_tour", metavar="DIR",
                      help="where the graph drawings go (default: ./tinygrad_block_tour)")
    tour.add_argument("--device", type=cli.device_arg, default="cpu", metavar="DEVICE",
                      help="where the block runs: cpu (default), cuda, cuda:N")
    cli.add_commands(commands)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "tour":
        from .tour import run
        return 0 if run(out_dir=args.out_dir, device=args.device)["ok"] else 1
    if args.command in cli.COMMANDS:
        return cli.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
