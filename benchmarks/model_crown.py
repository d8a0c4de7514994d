"""auto_LiRPA CROWN (and IBP) robustness radii of the whole digits vision transformer (`certify.lirpa`).

Trains `certify.experiments.DigitsTransformer` (defaults: D = 48, H = 3, 3 pre-LN layers, GELU), imports it with
`certify.model.from_torch`, and for the first ``--images`` test images prints, per norm, the radius of
`model_crown_radius` (the largest eps, by bracketing and bisection, at which every CROWN margin lower bound is
positive; bound propagation in float64, not a certificate), the number of CROWN calls and the seconds per image, with
the PGD margin at that radius (an attack that must not flip the label). ``--ibp`` tries IBP at one eps first.

    PYTHONPATH=. python benchmarks/model_crown.py [--images 5] [--norms inf 2] [--steps 10] [--ibp] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from certify import CertifyError
from certify.experiments import train_digits_transformer
from certify.lirpa import crown_margins, model_crown_radius
from certify.model import forward, from_torch


def pgd_margin(model, x0: torch.Tensor, label: int, eps: float, norm: str, steps: int = 40,
               restarts: int = 4) -> float:
    """The smallest margin f_label - max_{j != label} f_j that projected gradient descent finds in the ball."""
    generator = torch.Generator().manual_seed(0)
    x0 = x0.to(torch.float64)
    delta = eps * (2 * torch.rand(restarts, *x0.shape, generator=generator, dtype=torch.float64) - 1)
    if norm == "2":
        delta = delta * (eps / delta.flatten(1).norm(dim=1).clamp_min(eps)).view(-1, *[1] * x0.ndim)
    best = float("inf")
    for _ in range(steps):
        delta.requires_grad_(True)
        logits = forward(model, x0 + delta).reshape(restarts, -1)
        others = logits.clone()
        others[:, label] = -float("inf")
        margin = logits[:, label] - others.max(dim=1).values
        best = min(best, float(margin.detach().min()))
        (grad,) = torch.autograd.grad(margin.sum(), delta)
        with torch.no_grad():
            if norm == "inf":
                delta = (delta - 0.25 * eps * grad.sign()).clamp(-eps, eps)
            else:
                step = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-300).view(-1, *[1] * x0.ndim)
                delta = delta - 0.25 * eps * step
                delta = delta * (eps / delta.flatten(1).norm(dim=1).clamp_min(eps)).view(-1, *[1] * x0.ndim)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=5)
    parser.add_argument("--norms", nargs="+", default=["inf", "2"])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--steps", type=int, default=10, help="bisection steps after bracketing")
    parser.add_argument("--ibp", action="store_true", help="also try IBP margins at eps = 1e-6")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    torch.set_num_threads(1)
    t = time.perf_counter()
    result = train_digits_transformer(epochs=args.epochs)
    model = from_torch(result.model)
    print(f"trained DigitsTransformer (D = 48, H = 3, 3 layers): test accuracy {result.test_accuracy:.3f}, "
          f"{time.perf_counter() - t:.1f} s")
    rows = []
    print(f"{'image':>5} {'label':>5} {'pred':>4} {'norm':>4} {'radius':>10} {'calls':>5} {'seconds':>8} "
          f"{'PGD margin at r':>15}")
    for index in range(args.images):
        x0, label = result.test_images[index].to(torch.float64), int(result.test_labels[index])
        if args.ibp:
            t = time.perf_counter()
            try:
                ibp = f"min margin bound {crown_margins(model, x0, 1e-6, 'inf', label, 'IBP').min():.4g}"
            except CertifyError as error:
                ibp = f"failed: {error}"
            print(f"image {index}: IBP at eps = 1e-6 (inf): {ibp} ({time.perf_counter() - t:.1f} s)")
            rows.append({"image": index, "method": "IBP", "eps": 1e-6, "result": ibp})
        for norm in args.norms:
            radius = model_crown_radius(model, x0, norm, label=label, steps=args.steps)
            attacked = pgd_margin(model, x0, label, radius.value, norm) if radius.value > 0 else float("nan")
            prediction = int(forward(model, x0).reshape(-1).argmax())
            calls = radius.details.get("calls", 0)
            print(f"{index:5d} {label:5d} {prediction:4d} {norm:>4} {radius.value:10.3e} {calls:5d} "
                  f"{radius.seconds:8.1f} {attacked:15.4g}", flush=True)
            rows.append({"image": index, "label": label, "prediction": prediction, "norm": norm,
                         "radius": radius.value, "calls": calls, "seconds": radius.seconds,
                         "pgd_margin": attacked})
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"test_accuracy": result.test_accuracy, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
