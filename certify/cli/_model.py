"""`certify model MODEL.onnx|.pt --input X.npy --eps E --norm inf|2`: certified local Lipschitz constant of a model."""

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
    parser.add_argument("--input", required=True, metavar="X_FILE", help="the input x0 (.npy or .pt)")
    parser.add_argument("--eps", type=positive_float, required=True, help="radius of the eps-ball around x0")
    parser.add_argument("--norm", choices=("2", "inf"), required=True, help="norm of the ball and of the constant")
    parser.add_argument("--no-attained", action="store_true", help="skip the attained (adversarial) estimate")
    add_output_flags(parser)
    parser.set_defaults(run=run)


def _load(path: str, x0: np.ndarray):
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
        return from_torch(module.eval(), tuple(np.shape(x0)))
    raise InvalidInputError(f"{path!r}: expected a .onnx or .pt file")


def run(args: argparse.Namespace) -> int:
    """Certified upper bound on the local Lipschitz constant of a whole model on {x : ||x - x0|| <= eps}, the
    per-block factors, and an attained estimate (a lower bound, never labelled certified)."""
    from ..model import attained_lipschitz, certify_model

    x0 = load_center(args.input)
    x0 = np.asarray(x0.detach().cpu().numpy() if hasattr(x0, "detach") else x0)
    if not (np.issubdtype(x0.dtype, np.floating) or np.issubdtype(x0.dtype, np.integer)):
        raise InvalidInputError(f"--input must hold real numbers, got dtype {x0.dtype}")
    model = _load(args.model, x0)
    x = x0.reshape(model.input_shape) if x0.size == int(np.prod(model.input_shape)) else x0
    certificate = certify_model(model, x, args.eps, args.norm)
    attained = None if args.no_attained else attained_lipschitz(model, x, args.eps, args.norm, restarts=4, steps=10)
    if not args.quiet:
        print(f"{args.model}: {args.norm}-ball, eps = {args.eps:g}")
        for f in certificate.factors:
            print(f"  {f.block:<34} {f.factor:12.6g}   (input box radius {f.input_radius:.3g})")
        print(f"certified   {certificate.value:.6g}")
        if attained is not None:
            print(f"attained    {attained.value:.6g}  (estimate)")
            print(f"ratio       {certificate.value / attained.value:.4g}")
    out = {"model": args.model, "norm": args.norm, "eps": args.eps, "certified": certificate.to_json(),
           "attained": None if attained is None else attained.to_json()}
    write_output(args, out)
    return 0
