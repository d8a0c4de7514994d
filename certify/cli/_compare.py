"""`certify compare CHECKPOINT --eps ...`: bound propagation (auto_LiRPA) beside our Lipschitz certificates.

A layer checkpoint (certify's format or a torch.nn.MultiheadAttention state dict): for each eps, one row per method
bounding max ||F(X) - F(X0)||_p over the eps-ball around X0 (IBP, CROWN, auto_LiRPA-CROWN-Jacobian, ours local,
ours global where it exists, and the deviation PGD attains). A classifier checkpoint (`certify.experiments`
``save_classifier``): per method, the mean certified radius, the certified accuracy at each eps, seconds per input.
"""

from __future__ import annotations

import argparse

import torch

from .._errors import InvalidInputError
from ..report import format_rows
from ._common import add_multihead_flags, add_output_flags, positive_float, positive_int, write_output, zero_attn


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="IBP / CROWN (auto_LiRPA) beside our Lipschitz certificates",
                                   description=__doc__)
    parser.add_argument("checkpoint", help="an attention layer checkpoint, or a toy classifier checkpoint")
    parser.add_argument("--eps", type=positive_float, nargs="+", required=True, help="ball radii")
    parser.add_argument("--norm", "-p", choices=("2", "inf"), default="inf", help="the ball's (and output's) norm")
    parser.add_argument("--tokens", "-N", type=positive_int, default=4, help="sequence length N of the centre X0")
    parser.add_argument("--input", help="the centre X0 as a torch file holding an (N, D) tensor (default: seeded "
                                        "random tokens, each of norm 1)")
    add_multihead_flags(parser)
    parser.add_argument("--inputs", type=positive_int, default=8, help="classifier: number of test sequences")
    parser.add_argument("--time-budget", type=positive_float, default=5.0,
                        help="seconds for each of our branch-and-bound calls (and the SDP)")
    parser.add_argument("--seed", type=int, default=0)
    add_output_flags(parser)
    parser.set_defaults(run=run)


def _centre(args: argparse.Namespace, D: int) -> torch.Tensor:
    if args.input is None:
        generator = torch.Generator().manual_seed(args.seed)
        X0 = torch.randn(args.tokens, D, generator=generator, dtype=torch.float64)
        return X0 / X0.norm(dim=1, keepdim=True)
    try:
        X0 = torch.load(args.input, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001  (any unreadable file is a user error here)
        raise InvalidInputError(f"cannot read --input {args.input!r} as a torch tensor file: {error}") from None
    if not isinstance(X0, torch.Tensor) or X0.ndim != 2 or X0.shape[1] != D:
        shape = tuple(X0.shape) if isinstance(X0, torch.Tensor) else type(X0).__name__
        raise InvalidInputError(f"--input must hold an (N, D) tensor with D = {D}, got {shape}")
    return X0.to(torch.float64)


def _layer(args: argparse.Namespace) -> int:
    from .._checkpoint import load_layer
    from ..attention import as_weights
    from ..lirpa import compare_layer

    layer = load_layer(args.checkpoint, num_heads=args.heads, add_zero_attn=zero_attn(args))
    weights = as_weights(layer).to(torch.float64)
    X0 = _centre(args, weights.D)
    rows = []
    for eps in args.eps:
        rows += compare_layer(weights, X0, eps, args.norm, time_budget=args.time_budget)
    table = [(r.method, f"{r.eps:g}", "-" if r.lipschitz is None else r.lipschitz, r.deviation,
              "lower" if r.kind == "lower" else ("yes" if r.certified else "float64"), f"{r.seconds:.2f}")
             for r in rows]
    print(f"{type(layer).__name__} from {args.checkpoint}: N = {X0.shape[0]}, D = {weights.D}, H = {weights.H}, "
          f"l{args.norm} ball around X0; bound = max ||F(X) - F(X0)||_{args.norm} over the ball")
    print(format_rows(("method", "eps", f"Lip_{args.norm}", "bound", "certified", "seconds"), table))
    write_output(args, {"checkpoint": args.checkpoint, "layer": weights.describe(), "norm": args.norm,
                        "center": X0.tolist(), "rows": [r.as_row() for r in rows]})
    return 0


def _classifier(args: argparse.Namespace) -> int:
    from ..experiments import classifier_batch, load_classifier
    from ..lirpa import compare_classifier

    model = load_classifier(args.checkpoint)
    X, labels = classifier_batch(model.task, args.inputs, torch.Generator().manual_seed(args.seed))
    summaries = compare_classifier(model, X, labels, args.norm, args.eps, time_budget=args.time_budget)
    header = ("method", f"mean l{args.norm} radius", *(f"cert. acc @ {e:g}" for e in args.eps), "certified",
              "seconds / input")
    table = [(s.method, s.mean_radius, *(f"{s.certified_accuracy[e]:.2f}" for e in args.eps),
              "yes" if s.certified else "float64", f"{s.seconds_per_input:.3f}") for s in summaries]
    print(f"{model.kind} classifier from {args.checkpoint}: {args.inputs} test sequences, N = {model.task.N}, "
          f"D_in = {model.task.D_in}, D = {model.task.D}")
    print(format_rows(header, table))
    write_output(args, {"checkpoint": args.checkpoint, "kind": model.kind, "norm": args.norm,
                        "summaries": [s.as_row() for s in summaries]})
    return 0


def run(args: argparse.Namespace) -> int:
    """Compare bound propagation with our certificates on a layer (output bounds) or a classifier (radii)."""
    from ..experiments._classifier import is_classifier_checkpoint

    return _classifier(args) if is_classifier_checkpoint(args.checkpoint) else _layer(args)
