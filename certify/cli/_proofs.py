"""`certify proofs`: run the proofs of the claims certify relies on (the `proofs` package), same as `python -m proofs`."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from proofs._runner import add_arguments

    parser = subparsers.add_parser(
        "proofs", help="check every claim symbolically or numerically and write a Markdown report",
        description="Run proofs/<name>.py for every claim: PROVED (SymPy), CHECKED (numeric or interval, with "
                    "sample counts) or FAILED (with a counterexample). Exit status 1 if any claim FAILED, except a FAILED "
                    "erratum of MATH.md (a statement certify does not rely on; --strict counts those too).")
    add_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the selected proofs, print the table, write the report; 0 if none FAILED, 1 otherwise."""
    from proofs._runner import run_args

    return run_args(args)
