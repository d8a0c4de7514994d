"""`certify model MODEL.onnx|.pt --input X.npy --eps E --norm inf|2 [--radius] [--vnnlib P]`: certified local
Lipschitz constant of a model, its certified robustness radius, and VNNLIB properties answered."""

from __future__ import annotations

import argparse

import numpy as np

from .._errors import CertifyError, InvalidInputError
from ._common import add_output_flags, load_center, positive_float, write_output


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("model", help="certify a whole model (ONNX, or a torch module saved whole)",
                                   description=run.__doc__)
    parser.add_argument("model", help="an ONNX file (.onnx) or a torch.nn.TransformerEncoder(Layer) / "
                                      "DigitsTransformer saved with torch.save (.pt, loaded with weights_only=False)")
    parser.add_argument("--input", metavar="X_FILE", help="the input x0 (.npy or .pt); needed unless --vnnlib")
    parser.add_argument("--eps", type=positive_float, help="radius of the eps-ball around x0; needed with --input")
    parser.add_argument("--norm", choices=("2", "inf"), default="inf", help="norm of the ball and of the constant")
    parser.add_argument("--method", choices=("jacobian", "product"), default="jacobian",
                        help="jacobian: the model's Jacobian enclosed as one product (default); product: the product "
                             "of per-block constants")
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


def run(args: argparse.Namespace) -> int:
    """Certified upper bound on the local Lipschitz constant of a whole model on {x : ||x - x0|| <= eps}, the
    per-block factors, and an attained estimate (a lower bound, never labelled certified)."""
    from ..model import attained_lipschitz, certify_model

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
    certificate = certify_model(model, x, args.eps, args.norm, method=args.method)
    attained = None if args.no_attained else attained_lipschitz(model, x, args.eps, args.norm, restarts=4, steps=10)
    radius = None
    if args.radius:
        from ..model import certified_radius

        radius = certified_radius(model, x, args.norm)
    if not args.quiet:
        print(f"{args.model}: {args.norm}-ball, eps = {args.eps:g}, method {certificate.method}")
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
            print(f"radius      {radius.value:.6g}  (certified, {args.norm}-norm, class {radius.label})")
    out = {"model": args.model, "norm": args.norm, "eps": args.eps, "certified": certificate.to_json(),
           "attained": None if attained is None else attained.to_json(),
           "radius": None if radius is None else radius.to_json()}
    if args.vnnlib is not None:
        out["vnnlib"] = _run_vnnlib(args, model, quiet_output=True)
    write_output(args, out)
    return 0


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
