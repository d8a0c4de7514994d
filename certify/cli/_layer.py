"""`certify layer CHECKPOINT`: certify a saved layer (certify's format or a torch.nn.MultiheadAttention state dict)."""

from __future__ import annotations

import argparse

from .._certify import certify_layer
from .._checkpoint import load_layer
from .._errors import InvalidInputError, NotLipschitzError
from ..bounds import METHODS
from ..bounds.closed_form import THEOREM_3_1
from ._common import (add_multihead_flags, add_output_flags, load_center, positive_float, positive_int,
                      print_report, witness_sentence, write_output, zero_attn)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("layer", help="certify a saved attention layer", description=run.__doc__)
    parser.add_argument("checkpoint", help="file written by certify.save_layer, or an nn.MultiheadAttention state dict")
    parser.add_argument("--tokens", "-N", type=positive_int,
                        help="sequence length N >= 1 (required unless --center gives X0, whose rows are the tokens)")
    parser.add_argument("--norm", choices=("2", "inf"), required=True, help="operator norm on vec(X)")
    parser.add_argument("--radius", type=positive_float,
                        help="certify with every token in ||x_i||_2 <= R (required for dot-product attention)")
    parser.add_argument("--center", metavar="X0_FILE",
                        help="certify on an eps-ball around the input X0 (N x D) stored in a .npy or .pt file")
    parser.add_argument("--eps", type=positive_float, help="radius of the eps-ball around --center")
    parser.add_argument("--eps-norm", choices=("inf", "2"), default="inf",
                        help="norm of the eps-ball on vec(X - X0) (default inf)")
    add_multihead_flags(parser)
    parser.add_argument("--method", action="append", choices=[*METHODS, "all"],
                        help="certified method(s) to run (repeatable; default: every default one that applies; "
                             "'all' adds the slower sdp)")
    parser.add_argument("--time-budget", type=positive_float, default=10.0, metavar="SECONDS",
                        help="seconds for each branch-and-bound method (default 10); Ctrl-C keeps the bound so far")
    parser.add_argument("--no-lower", action="store_true", help="skip the adversarial lower bound")
    add_output_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Certify Lip_2 or Lip_inf of a saved attention layer on sequences of N tokens.

    L2 attention (tied) is certified globally. Dot-product attention is not Lipschitz (Theorem 3.1), so it needs
    a bounded domain: --radius (every token in a ball), or --center X0_FILE --eps E (an eps-ball around an input);
    so does untied L2 attention.
    """
    if (args.center is None) != (args.eps is None):
        raise InvalidInputError("an eps-ball needs both --center X0_FILE and --eps E")
    if args.center is not None and args.radius is not None:
        raise InvalidInputError("give either --radius or --center/--eps, not both")
    if args.center is None and args.tokens is None:
        raise InvalidInputError("give --tokens N (or --center X0_FILE, whose rows are the tokens)")
    layer = load_layer(args.checkpoint, num_heads=args.heads, add_zero_attn=zero_attn(args))
    center = None if args.center is None else load_center(args.center)
    tokens = args.tokens if center is None else center.shape[0]
    if args.radius is None and center is None and layer.attention_weights().kind == "dp":
        raise NotLipschitzError(f"{THEOREM_3_1} {witness_sentence(layer.attention_weights(), tokens, args.norm)}")
    methods = ["all"] if args.method and "all" in args.method else args.method
    report = certify_layer(layer, args.tokens, args.norm, radius=args.radius, methods=methods,
                           lower=not args.no_lower, time_budget=args.time_budget, progress=not args.quiet,
                           center=center, eps=args.eps, eps_norm=args.eps_norm)
    print_report(report, f"{type(layer).__name__} from {args.checkpoint}, N = {report.tokens}, {args.norm}-norm, "
                         f"{report.domain}")
    write_output(args, report.to_json())
    return 0
