"""`certify demo`: train the toy L2 and dot-product layers (seconds) and certify both, in both norms."""

from __future__ import annotations

import argparse

from .._certify import certify_layer
from ..experiments import ToyTask, train_toy_layer
from ._common import add_output_flags, positive_float, print_report, witness_sentence, write_output


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="train two small attention layers and certify them",
                                   description=run.__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-budget", type=positive_float, default=5.0, metavar="SECONDS",
                        help="seconds for each searching method per table (default 5)")
    add_output_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Train an L2-MHA and a DP-MHA layer on the toy task, then print their certificate tables.

    The L2 layer is certified globally; the DP layer on the ball where its inputs live (Theorem 3.1).
    """
    task = ToyTask()
    reports = []
    for kind, radius in (("l2", None), ("dp", task.radius)):
        layer, loss = train_toy_layer(kind, task, seed=args.seed)
        name = {"l2": "L2-MHA (tied)", "dp": "DP-MHA"}[kind]
        for norm in ("2", "inf"):
            report = certify_layer(layer, task.N, norm, radius=radius, time_budget=args.time_budget,
                                   progress=not args.quiet)
            domain = "global" if radius is None else f"tokens in the ball R = {radius:g}"
            print_report(report, f"{name}, N = {task.N}, D = {task.D}, H = {task.H}, {norm}-norm, {domain} "
                                 f"(toy test MSE {loss:.4f})")
            reports.append(report.to_json())
            if kind == "dp":
                print("Theorem 3.1, outside the ball: " + witness_sentence(layer.attention_weights(), task.N, norm) + "\n")
    write_output(args, {"reports": reports})
    return 0
