"""The `certify` command line. Each subcommand lives in its own module listed in `_commands.COMMANDS`."""

from __future__ import annotations

import argparse
import importlib
import sys

from .._errors import CertifyError
from ._commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="certify", description="Certified Lipschitz constants of self-attention.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; CertifyError or MemoryError -> message on stderr and exit 2; Ctrl-C -> exit 130."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CertifyError as error:
        print(f"certify {args.command}: error: {error}", file=sys.stderr)
        return 2
    except MemoryError as error:  # past the memory estimates (certify._footprint): a refusal, not a traceback
        print(f"certify {args.command}: error: out of memory ({error or 'MemoryError'}); use fewer tokens or a "
              "closed-form method", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"certify {args.command}: interrupted", file=sys.stderr)
        return 130
