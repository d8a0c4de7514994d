"""Flags and output shared by the subcommands."""

from __future__ import annotations

import argparse
import math
import sys

from .._certify import Report
from .._errors import CertifyError, InvalidInputError
from ..attention import AttentionWeights
from ..bounds import dp_witness
from .._errors import CertifyError
from ..report import check_json_path, format_table, format_value, write_json


def json_file(text: str) -> str:
    """--json FILE: its directory must exist (checked before any work is done; it is never created)."""
    try:
        return check_json_path(text)
    except CertifyError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", type=json_file,
                        help="also write the numbers as JSON to FILE (its directory must exist)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_multihead_flags(parser: argparse.ArgumentParser) -> None:
    """--heads and --add-zero-attn: what a torch.nn.MultiheadAttention state dict does not record."""
    parser.add_argument("--heads", type=positive_int, help="number of heads (torch.nn.MultiheadAttention state dicts)")
    parser.add_argument("--add-zero-attn", choices=("no", "yes"), dest="add_zero_attn",
                        help="whether the torch.nn.MultiheadAttention had add_zero_attn=True; its state dict does "
                             "not say, so state dicts need --add-zero-attn no ('yes' is not supported)")


def zero_attn(args: argparse.Namespace) -> bool | None:
    """--add-zero-attn as load_layer's add_zero_attn (None when not given)."""
    return None if args.add_zero_attn is None else args.add_zero_attn == "yes"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def load_center(path: str) -> "torch.Tensor":
    """An input X0 of shape (N, D) from a .npy file (no pickles) or a .pt file holding one tensor
    (``weights_only=True``); shape, dtype and NaN are checked against the layer by `certify_layer`."""
    import numpy as np
    import torch

    try:
        if path.endswith(".npy"):
            value = np.load(path, allow_pickle=False)
        elif path.endswith(".pt") or path.endswith(".pth"):
            value = torch.load(path, map_location="cpu", weights_only=True)
        else:
            raise InvalidInputError(f"--center {path!r}: expected a .npy or .pt file")
    except CertifyError:
        raise
    except Exception as error:  # unreadable file: say which, never a traceback
        raise InvalidInputError(f"--center {path!r} could not be read: {error}") from None
    if isinstance(value, np.ndarray):
        return value
    if not isinstance(value, torch.Tensor):
        raise InvalidInputError(f"--center {path!r} must hold one tensor of shape (N, D), got {type(value).__name__}")
    return value


def print_report(report: Report, title: str) -> None:
    print(format_table(report.certificates, title=title))
    for reason in report.skipped:
        print(f"skipped {reason}")
    upper, lower = report.best_upper(), report.best_lower()
    if upper is not None and lower is not None:
        print(f"best certified upper / best lower = {format_value(upper.value)} / {format_value(lower.value)}"
              f" = {report.ratio:.4f}  ({upper.method} vs {lower.method})")
    print()
    sys.stdout.flush()


def write_output(args: argparse.Namespace, obj: object) -> None:
    if getattr(args, "json", None):
        write_json(args.json, obj)
        if not args.quiet:
            print(f"wrote {args.json}")


WITNESS_MAX_ND = 256  # dp_witness forms 14 dense (N D)^2 Jacobians and their norms: at most 7 MiB, well under a second


def witness_sentence(weights: AttentionWeights, N: int, norm: str) -> str:
    """The Theorem 3.1 witness for this layer as one sentence: ||J(t X0)|| for growing t.

    For long sequences (N D > WITNESS_MAX_ND) the witness is shown with fewer tokens, and the sentence says so:
    its dense Jacobians would not fit in memory (N = 10^7 asked for petabytes).
    """
    if N < 2:
        return ""
    shown = max(2, min(N, WITNESS_MAX_ND // weights.D))
    witness = dp_witness(weights, shown, norm=norm)
    values = ", ".join(f"{format_value(v)} (t={t:g})" for t, v in zip(witness.scales, witness.norms))
    where = "" if shown == N else f" (shown with N = {shown} tokens: dense Jacobians for N = {N} would not fit)"
    return (f"For this layer, at X = t X0 (token 0 at the origin, the others at +-u){where} ||J||_{norm} = {values}: "
            f"it grew {witness.growth:.3g}x.")
