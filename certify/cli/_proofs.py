"""`certify proofs`: run the proofs of the claims certify relies on (the `proofs` package), same as `python -m proofs`."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from proofs._runner import add_arguments

    parser = subparsers.add_parser(
        "proofs", help="check every claim symbolically or numerically and write a Markdown report",
        description="Run proofs/<name>.py for every claim: PROVED, PROVED-MODULO (named lemmas), VERIFIED (interval "
                    "arithmetic), SAMPLED (numeric, with counts), UNPROVED or REFUTED (rigorous counterexample), each "
                    "with its scope. Exit status 1 if a claim is below what certify needs of it (see proofs/README.md).")
    add_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the selected proofs, print the table, write the report; 0 if every claim meets its requirement, else 1."""
    from proofs._runner import run_args

    return run_args(args)
