"""`certify model MODEL.onnx|.pt --input X.npy --eps E --norm inf|2 [--radius] [--vnnlib P]`: certified local
Lipschitz constant of a model, its certified robustness radius, and VNNLIB properties answered."""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from typing import TYPE_CHECKING

from .._errors import CertifyError, InvalidInputError
from .._progress import progress_bar
from ._common import add_output_flags, load_center, positive_float, write_output


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("model", help="certify a whole model (ONNX, or a torch module saved whole)",
                                   description=run.__doc__)
    parser.add_argument("model", help="an ONNX file (.onnx) or a torch.nn.TransformerEncoder(Layer) / "
                                      "DigitsTransformer / CharTransformer saved with torch.save (.pt, loaded with "
                                      "weights_only=False); a CharTransformer's input is X = embedding(ids) + "
                                      "position[:N] (N x D)")
    parser.add_argument("--input", metavar="X_FILE", help="the input x0 (.npy or .pt); needed unless --vnnlib")
    parser.add_argument("--eps", type=positive_float, help="radius of the eps-ball around x0; needed with --input")
    parser.add_argument("--norm", choices=("2", "inf"), default="inf", help="norm of the ball and of the constant")
    parser.add_argument("--method", choices=("jacobian", "product"), default="jacobian",
                        help="jacobian: the model's Jacobian enclosed as one product (default); product: the product "
                             "of per-block constants")
    parser.add_argument("--nested", type=int, default=0, metavar="K",
                        help="first enclose K balls of radii eps 2^(-k/K), k = K .. 1, and narrow the chain's boxes by "
                             "their slopes (K + 1 chains' time; default 0)")
    parser.add_argument("--radius", action="store_true",
                        help="also the certified robustness radius of the predicted class about x0")
    parser.add_argument("--vnnlib", metavar="PROPERTY", help="answer a VNNLIB property (verified / falsified / "
                                                             "unknown; inputs X_i in the model's input order)")
    parser.add_argument("--no-attained", action="store_true", help="skip the attained (adversarial) estimate")
    add_output_flags(parser)
    parser.set_defaults(run=run)


def _load(path: str, x0: np.ndarray | None):
    from ..model import from_onnx, from_torch

    if path.endswith(".onnx"):
        return from_onnx(path)[0]
    if path.endswith(".pt") or path.endswith(".pth"):
        import torch

        try:
            module = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as error:
            raise InvalidInputError(f"{path!r} could not be read: {error}") from None
        if not isinstance(module, torch.nn.Module):
            raise InvalidInputError(f"{path!r} must hold a whole torch module, got {type(module).__name__}")
        if x0 is None:
            raise InvalidInputError("a .pt model needs --input (its input shape); an .onnx file carries it")
        return from_torch(module.eval(), tuple(np.shape(x0)))
    raise InvalidInputError(f"{path!r}: expected a .onnx or .pt file")


if TYPE_CHECKING:  # certify.model (torch, onnx) is imported when the command runs, not when the CLI starts
    from ..model import Model, ModelCertificate, ModelInterrupted, ModelRadius

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as `certify.cli.main` returns for any interrupted command."""


def _certify(args: argparse.Namespace, model: Model, x: np.ndarray) -> ModelCertificate:
    """certify_model with a per-block progress bar (off with --quiet or when stderr is not a terminal)."""
    from ..model import certify_model

    with progress_bar(not args.quiet, total=len(model.blocks) * (args.nested + 1), desc="certify model", unit="block",
                      leave=False) as bar:
        return certify_model(model, x, args.eps, args.norm, method=args.method, progress=lambda k: bar.update(1),
                             nested=args.nested)


def _radius(args: argparse.Namespace, model: Model, x: np.ndarray) -> ModelRadius:
    """certified_radius with a per-block progress bar showing the eps under test and the largest certified."""
    from ..model import certified_radius

    best = [0.0]

    def step(eps: float, radius: float) -> None:
        best[0] = max(best[0], radius)
        bar.set_postfix_str(f"eps {eps:.3g} {'certified' if radius >= eps else 'not certified'}, best {best[0]:.3g}")

    with progress_bar(not args.quiet, desc="radius", unit="block", leave=False) as bar:
        return certified_radius(model, x, args.norm, progress=lambda k: bar.update(1), on_step=step)


def _interrupted_constant(args: argparse.Namespace, interrupt: ModelInterrupted) -> int:
    """Ctrl-C while the constant was computed: report the longest certified prefix (never as the model's bound)."""
    longest = interrupt.longest
    done = len(interrupt.prefixes)
    if longest is None:
        message = "interrupted before anything was certified"
    else:
        message = (f"interrupted: the whole model's constant was not certified; the longest completed prefix, blocks "
                   f"1..{done} of {interrupt.blocks} (up to {longest.block}), has certified Lip_{args.norm} <= "
                   f"{longest.value:.6g} on the ball")
    if not args.quiet:
        print(f"{args.model}: {args.norm}-ball, eps = {args.eps:g}, method {args.method}")
        for p in interrupt.prefixes:
            print(f"  up to {p.block:<28} {p.value:12.6g}   (certified prefix; output box radius "
                  f"{p.output_radius:.3g})")
        print(message)
    print(f"certify model: {message}", file=sys.stderr)
    prefix = None if longest is None else {**dataclasses.asdict(longest), "blocks": done, "of": interrupt.blocks,
                                            "label": "certified (prefix of the model)"}
    write_output(args, {"model": args.model, "norm": args.norm, "eps": args.eps, "method": args.method,
                        "certified": None, "attained": None, "radius": None,
                        "interrupted": {"stage": "constant", "message": message, "prefix": prefix,
                                        "prefixes": [dataclasses.asdict(p) for p in interrupt.prefixes]}})
    return INTERRUPTED


def run(args: argparse.Namespace) -> int:
    """Certified upper bound on the local Lipschitz constant of a whole model on {x : ||x - x0|| <= eps}, the
    per-block factors, and an attained estimate (a lower bound, never labelled certified). Ctrl-C keeps what is
    certified (the longest certified prefix of the model, or the largest certified radius so far) and exits 130."""
    from ..model import ModelInterrupted, attained_lipschitz

    if args.input is None and args.vnnlib is None:
        raise InvalidInputError("give --input X_FILE with --eps, or --vnnlib PROPERTY")
    if args.input is not None and args.eps is None:
        raise InvalidInputError("--input needs --eps")
    if args.input is None:
        if args.radius:
            raise InvalidInputError("--radius needs --input")
        return _run_vnnlib(args, _load(args.model, None))
    x0 = load_center(args.input)
    x0 = np.asarray(x0.detach().cpu().numpy() if hasattr(x0, "detach") else x0)
    if not (np.issubdtype(x0.dtype, np.floating) or np.issubdtype(x0.dtype, np.integer)):
        raise InvalidInputError(f"--input must hold real numbers, got dtype {x0.dtype}")
    model = _load(args.model, x0)
    x = x0.reshape(model.input_shape) if x0.size == int(np.prod(model.input_shape)) else x0
    try:
        certificate = _certify(args, model, x)
    except ModelInterrupted as interrupt:
        return _interrupted_constant(args, interrupt)
    interrupted = None
    attained = None
    if not args.no_attained:
        try:
            attained = attained_lipschitz(model, x, args.eps, args.norm, restarts=4, steps=10)
        except KeyboardInterrupt:
            interrupted = {"stage": "attained", "message": "interrupted during the attained estimate (the "
                                                           "certified constant above is complete)"}
    radius = None
    if args.radius and interrupted is None:
        radius = _radius(args, model, x)
        if radius.interrupted:
            interrupted = {"stage": "radius", "message": (
                f"interrupted: radius {radius.value:.6g} is the largest eps certified before Ctrl-C (the bisection "
                "stopped early)" if radius.value > 0 else "interrupted before any radius was certified")}
    if not args.quiet:
        nested = f", boxes narrowed by {args.nested} smaller balls" if args.nested else ""
        print(f"{args.model}: {args.norm}-ball, eps = {args.eps:g}, method {certificate.method}{nested}")
        if certificate.note:
            print(f"  note: {certificate.note}")
        for f in certificate.factors:
            print(f"  {f.block:<34} {f.factor:12.6g}   (input box radius {f.input_radius:.3g})")
        for p in certificate.prefixes:
            print(f"  up to {p.block:<28} {p.value:12.6g}   (output box radius {p.output_radius:.3g})")
        print(f"certified   {certificate.value:.6g}")
        if attained is not None:
            print(f"attained    {attained.value:.6g}  (estimate)")
            print(f"ratio       {certificate.value / attained.value:.4g}")
        if radius is not None:
            mark = "certified, INTERRUPTED: the largest so far" if radius.interrupted else "certified"
            print(f"radius      {radius.value:.6g}  ({mark}, {args.norm}-norm, class {radius.label})")
        if interrupted is not None:
            print(interrupted["message"])
    if interrupted is not None:
        print(f"certify model: {interrupted['message']}", file=sys.stderr)
    out = {"model": args.model, "norm": args.norm, "eps": args.eps, "nested": args.nested,
           "certified": certificate.to_json(),
           "attained": None if attained is None else attained.to_json(),
           "radius": None if radius is None else radius.to_json(), "interrupted": interrupted}
    if args.vnnlib is not None and interrupted is None:
        out["vnnlib"] = _run_vnnlib(args, model, quiet_output=True)
    write_output(args, out)
    return INTERRUPTED if interrupted is not None else 0


def _run_vnnlib(args: argparse.Namespace, model, quiet_output: bool = False):
    """Answer --vnnlib: verified only when every unsafe disjunct is refuted by certified bounds."""
    from ..model import decide, model_output, pgd_counterexample, read_vnnlib, vnnlib_bounds

    n_out = int(np.prod(model_output(model, np.zeros(int(np.prod(model.input_shape)))).shape))
    prop = read_vnnlib(args.vnnlib, int(np.prod(model.input_shape)), n_out)
    result = decide(prop, vnnlib_bounds(model),
                    lambda lo, hi, A, b: pgd_counterexample(model, lo, hi, A, b),
                    lambda x: model_output(model, x))
    if not args.quiet:
        print(f"{args.vnnlib}: {result.status} ({result.vnncomp}) in {result.seconds:.1f} s: {result.message}")
    if quiet_output:
        return result.to_json()
    write_output(args, {"model": args.model, "vnnlib": result.to_json()})
    return 0
