"""Whole-model certified local Lipschitz constants on the digits vision transformer, end to end through ONNX.

Trains `certify.experiments.DigitsTransformer` (scikit-learn digits, seconds on a CPU), exports it with
torch.onnx (opset 17), imports the graph with `certify.model.from_onnx`, checks it against onnxruntime, and for each
eps and norm prints: certified (`certify_model`), the baseline without the direct residual Jacobians (every
residual as 1 + Lip(inner): the product of per-layer local bounds; DP attention has no global constant, so no
global per-layer product exists), attained (`attained_lipschitz`, an estimate), certified / attained, seconds.

    PYTHONPATH=. python benchmarks/model_certify.py [--eps 1e-3 1e-2] [--json FILE]
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
from certify.model import attained_lipschitz, certify_model, forward, from_onnx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, nargs="+", default=[1e-3, 1e-2])
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
    header = f"{'norm':>4} {'eps':>7} {'certified':>11} {'1+Lip base':>11} {'attained':>9} {'ratio':>8} {'seconds':>8}"
    print(header)
    for norm in args.norms:
        for eps in args.eps:
            t = time.perf_counter()
            cert = certify_model(model, x0[0], eps, norm)
            base = certify_model(model, x0[0], eps, norm, direct=False)
            attained = attained_lipschitz(model, x0[0], eps, norm, restarts=4, steps=10)
            seconds = time.perf_counter() - t
            ratio = cert.value / attained.value
            rows.append({"norm": norm, "eps": eps, "certified": cert.value, "baseline": base.value,
                         "attained": attained.value, "ratio": ratio, "seconds": seconds,
                         "certify_seconds": cert.seconds, "factors": cert.to_json()["factors"]})
            print(f"{norm:>4} {eps:7.0e} {cert.value:11.4g} {base.value:11.4g} {attained.value:9.4g} {ratio:8.3g} "
                  f"{seconds:8.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"test_accuracy": result.test_accuracy, "onnx_error": error, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
