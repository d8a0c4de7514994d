"""Soundness of whole-model certificates over many inputs (issue 17 target): attained <= certified, radii unbroken.

Two models: the demo digits vision transformer (`certify.experiments.DigitsTransformer`, trained here in under a
minute, exported with torch.onnx and imported with `certify.model.from_onnx`, checked against onnxruntime) and a
small `torch.nn.TransformerEncoder` imported with `from_torch` (2 post-LN layers, N = 6, D = 8, H = 2, GELU), with
mean pooling and a random linear head so that it classifies.

For each of ``--inputs`` inputs (ViT: test images; encoder: standard normal sequences), each norm and each eps,
the certified local constant (`certify_model`, method "jacobian") is compared with the attained one
(`attained_lipschitz`: the Jacobian's norm at x0, at random points and along projected ascent of ||J|| inside the
ball), and attained <= certified must hold for every row. For the first ``--radii`` inputs of the encoder (and
``--vit-radii`` of the ViT: 5-10 certify calls of 10-30 s each per radius), the certified robustness radius
(`certified_radius`) is attacked with PGD on the logit margin inside the ball of that radius
(`model_crown.pgd_margin`); the margin must stay positive ("broken" must be never). Radii are bisected with
``--radius-steps`` steps after bracketing (a coarser radius is still certified).

    PYTHONPATH=. python benchmarks/model_soundness.py [--inputs 20] [--vit-eps 1e-5] [--encoder-eps 1e-4 1e-3]
        [--norms inf 2] [--radii 3] [--vit-radii 1] [--radius-steps 4] [--skip-vit] [--json FILE]

Exit status 1 if any attained value exceeds its certificate or any certified radius is broken.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
import warnings

import numpy as np
import torch

from certify.model import (Linear, Model, Pool, attained_lipschitz, certified_radius, certify_model, forward,
                           from_onnx, from_torch)
from model_crown import pgd_margin


@dataclasses.dataclass(frozen=True)
class Row:
    model: str
    input: int
    norm: str
    eps: float
    certified: float
    attained: float
    seconds: float

    @property
    def ratio(self) -> float:
        return self.certified / self.attained

    @property
    def sound(self) -> bool:
        return self.attained <= self.certified


@dataclasses.dataclass(frozen=True)
class RadiusRow:
    model: str
    input: int
    norm: str
    label: int
    radius: float
    margin: float  # the logit margin at the input
    pgd_margin: float  # the smallest margin PGD found in the ball of that radius (must stay > 0)
    seconds: float

    @property
    def broken(self) -> bool:
        return self.radius > 0 and not self.pgd_margin > 0


def vit(epochs: int) -> tuple[Model, list[np.ndarray]]:
    """The demo ViT through ONNX (as benchmarks/model_certify.py), and its test images."""
    from certify.experiments import train_digits_transformer

    t = time.perf_counter()
    result = train_digits_transformer(epochs=epochs)
    x0 = result.test_images[:1]
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = os.path.join(tmp, "vit.onnx")
        torch.onnx.export(result.model, (x0,), path, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"])
        model, _ = from_onnx(path)
        import onnxruntime

        reference = onnxruntime.InferenceSession(path).run(None, {"x": x0.numpy()})[0]
    error = float(np.abs(forward(model, x0[0], torch.float32).numpy().reshape(reference.shape) - reference).max())
    print(f"digits ViT: test accuracy {result.test_accuracy:.3f}, trained in {time.perf_counter() - t:.1f} s; "
          f"ONNX import, {len(model.blocks)} blocks, max |ours - onnxruntime| = {error:.2e}")
    return model, [image.numpy().astype(np.float64) for image in result.test_images]


def encoder(seed: int = 0, N: int = 6, D: int = 8, classes: int = 5) -> tuple[Model, list[np.ndarray]]:
    """A random 2-layer post-LN TransformerEncoder (from_torch) + mean pooling + a linear head; standard normal
    input sequences."""
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(D, 2, 2 * D, dropout=0.0, activation="gelu", batch_first=True)
    module = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    rng = np.random.default_rng(seed)
    head = Linear(rng.standard_normal((D, classes)) / np.sqrt(D), rng.standard_normal(classes) * 0.1)
    model = from_torch(module, (N, D))
    model = Model(model.blocks + (Pool("mean"), head), (N, D))
    print(f"TransformerEncoder: 2 post-LN layers, N = {N}, D = {D}, H = 2, GELU, mean pool, {classes} classes "
          f"(from_torch, {len(model.blocks)} blocks)")
    return model, [rng.standard_normal((N, D)) for _ in range(1000)]


def soundness(name: str, model: Model, inputs: list[np.ndarray], eps_values: list[float], norms: list[str],
              restarts: int, steps: int) -> list[Row]:
    rows = []
    for index, x in enumerate(inputs):
        for norm in norms:
            for eps in eps_values:
                t = time.perf_counter()
                certified = certify_model(model, x, eps, norm).value
                attained = attained_lipschitz(model, x, eps, norm, restarts=restarts, steps=steps, seed=index).value
                row = Row(name, index, norm, eps, certified, attained, time.perf_counter() - t)
                rows.append(row)
                print(f"{name:>8} {index:5d} {norm:>4} {eps:7.0e} {certified:11.5g} {attained:11.5g} {row.ratio:8.4f} "
                      f"{row.seconds:7.1f}{'' if row.sound else '   UNSOUND'}", flush=True)
    return rows


def radii(name: str, model: Model, inputs: list[np.ndarray], norms: list[str], steps: int) -> list[RadiusRow]:
    rows = []
    for index, x in enumerate(inputs):
        for norm in norms:
            t = time.perf_counter()
            r = certified_radius(model, x, norm, steps=steps)
            y = forward(model, x)[0].numpy().reshape(-1)
            margin0 = float(y[r.label] - np.delete(y, r.label).max())
            margin = pgd_margin(model, torch.tensor(x), r.label, r.value, norm) if r.value > 0 else float("nan")
            row = RadiusRow(name, index, norm, r.label, r.value, margin0, margin, time.perf_counter() - t)
            rows.append(row)
            print(f"{name:>8} {index:5d} {norm:>4} {r.label:5d} {r.value:10.4g} {margin0:11.5g} {margin:13.5g} "
                  f"{row.seconds:7.1f}"
                  f"{'   BROKEN' if row.broken else ''}", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=20)
    parser.add_argument("--vit-eps", type=float, nargs="+", default=[1e-5])
    parser.add_argument("--encoder-eps", type=float, nargs="+", default=[1e-4, 1e-3])
    parser.add_argument("--norms", nargs="+", default=["inf", "2"])
    parser.add_argument("--radii", type=int, default=3, help="certified radii of the first K encoder inputs")
    parser.add_argument("--vit-radii", type=int, default=1, help="certified radii of the first K ViT images")
    parser.add_argument("--radius-steps", type=int, default=4, help="bisection steps after bracketing")
    parser.add_argument("--restarts", type=int, default=4, help="attained search: random starts per row")
    parser.add_argument("--steps", type=int, default=10, help="attained search: ascent steps per start")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--skip-vit", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    models = [("encoder", *encoder(), args.encoder_eps, args.radii)]
    if not args.skip_vit:
        models.append(("vit", *vit(args.epochs), args.vit_eps, args.vit_radii))
    rows: list[Row] = []
    radius_rows: list[RadiusRow] = []
    print(f"{'model':>8} {'input':>5} {'norm':>4} {'eps':>7} {'certified':>11} {'attained':>11} {'ratio':>8} "
          f"{'seconds':>7}")
    for name, model, inputs, eps_values, _ in models:
        rows += soundness(name, model, inputs[:args.inputs], eps_values, args.norms, args.restarts, args.steps)
    print(f"{'model':>8} {'input':>5} {'norm':>4} {'label':>5} {'radius':>10} {'margin x0':>11} {'PGD margin':>13} "
          f"{'seconds':>7}")
    for name, model, inputs, _, count in models:
        radius_rows += radii(name, model, inputs[:count], args.norms, args.radius_steps)
    unsound = [r for r in rows if not r.sound]
    broken = [r for r in radius_rows if r.broken]
    for name, *_ in models:
        mine = [r for r in rows if r.model == name]
        for norm in args.norms:
            ratios = [r.ratio for r in mine if r.norm == norm]
            print(f"{name} {norm}-norm: {len(ratios)} rows, certified / attained from {min(ratios):.4f} to "
                  f"{max(ratios):.4f} (median {float(np.median(ratios)):.4f}), "
                  f"{sum(not r.sound for r in mine if r.norm == norm)} unsound")
    print(f"attained > certified: {len(unsound)} of {len(rows)} rows; radii broken by PGD: {len(broken)} of "
          f"{len(radius_rows)}; {time.perf_counter() - start:.0f} s in all")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rows": [{**dataclasses.asdict(r), "ratio": r.ratio, "sound": r.sound} for r in rows],
                       "radii": [{**dataclasses.asdict(r), "broken": r.broken} for r in radius_rows],
                       "unsound": len(unsound), "broken": len(broken)}, handle, indent=1)
    return 1 if unsound or broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
