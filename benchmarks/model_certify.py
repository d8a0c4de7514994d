"""Whole-model certified local Lipschitz constants on the digits vision transformer, end to end through ONNX.

Trains `certify.experiments.DigitsTransformer` (scikit-learn digits, seconds on a CPU), exports it with
torch.onnx (opset 17), imports the graph with `certify.model.from_onnx`, checks it against onnxruntime, and for each
eps and norm prints: certified (`certify_model`, method "jacobian": the model's Jacobian as one product plus a
certified error), the baseline "product" (the product of per-block local constants on propagated boxes, residuals
by their direct Jacobian or 1 + Lip), attained (`attained_lipschitz`, an estimate), certified / attained, seconds of
each; with --radii K also the certified robustness radius (`certified_radius`) of the first K test images.

    PYTHONPATH=. python benchmarks/model_certify.py [--eps 1e-6 1e-5 1e-4 1e-3] [--radii 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

import numpy as np
import torch

from certify.experiments import train_digits_transformer
from certify.model import attained_lipschitz, certified_radius, certify_model, forward, from_onnx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, nargs="+", default=[1e-6, 1e-5, 1e-4, 1e-3])
    parser.add_argument("--radii", type=int, default=0, help="certified radii of the first K test images")
    parser.add_argument("--norms", nargs="+", default=["inf", "2"])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--input", type=int, default=0, help="index of the test image")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    torch.set_num_threads(1)
    t = time.perf_counter()
    result = train_digits_transformer(epochs=args.epochs)
    print(f"trained DigitsTransformer (D = 48, H = 3, 3 layers): test accuracy {result.test_accuracy:.3f}, "
          f"{time.perf_counter() - t:.1f} s")
    x0 = result.test_images[args.input:args.input + 1]
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = os.path.join(tmp, "vit.onnx")
        torch.onnx.export(result.model, (x0,), path, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"])
        model, _ = from_onnx(path)
        import onnxruntime

        reference = onnxruntime.InferenceSession(path).run(None, {"x": x0.numpy()})[0]
    error = float(np.abs(forward(model, x0[0], torch.float32).numpy().reshape(reference.shape) - reference).max())
    print(f"ONNX import: {len(model.blocks)} blocks, max |ours - onnxruntime| = {error:.2e}")
    rows = []
    header = (f"{'norm':>4} {'eps':>7} {'jacobian':>11} {'s':>6} {'product':>11} {'s':>6} {'attained':>9} "
              f"{'ratio':>9} {'product ratio':>13}")
    print(header)
    for norm in args.norms:
        for eps in args.eps:
            cert = certify_model(model, x0[0], eps, norm)
            base = certify_model(model, x0[0], eps, norm, method="product")
            attained = attained_lipschitz(model, x0[0], eps, norm, restarts=4, steps=10)
            ratio, base_ratio = cert.value / attained.value, base.value / attained.value
            rows.append({"norm": norm, "eps": eps, "certified": cert.value, "baseline": base.value,
                         "attained": attained.value, "ratio": ratio, "baseline_ratio": base_ratio,
                         "certify_seconds": cert.seconds, "baseline_seconds": base.seconds,
                         "attained_seconds": attained.seconds, "prefixes": cert.to_json()["prefixes"]})
            print(f"{norm:>4} {eps:7.0e} {cert.value:11.4g} {cert.seconds:6.1f} {base.value:11.4g} "
                  f"{base.seconds:6.1f} {attained.value:9.4g} {ratio:9.3g} {base_ratio:13.3g}", flush=True)
    radii = []
    if args.radii:
        print(f"{'image':>5} {'norm':>4} {'label':>5} {'radius':>10} {'calls':>5} {'seconds':>7}")
    for i in range(args.radii):
        for norm in args.norms:
            r = certified_radius(model, result.test_images[i], norm)
            radii.append({"image": i, **r.to_json()})
            print(f"{i:5d} {norm:>4} {r.label:5d} {r.value:10.3g} {r.calls:5d} {r.seconds:7.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"test_accuracy": result.test_accuracy, "onnx_error": error, "rows": rows, "radii": radii},
                      handle, indent=1)


if __name__ == "__main__":
    main()
