"""One box X0 +- eps around a trained layer's real input: the simplex enclosure of the DP Jacobian and the simplex
row sums (`certify/bounds/local/_simplex.py`) beside the plain interval enclosure (`jacobian_enclosure`, the
baseline), and the largest row sum of |J| sampled at random points and vertices of the box (attained, a lower bound).

    python benchmarks/simplex_enclosure.py [--size 48] [--eps 1e-2,3e-2,1e-1] [--samples 200] [--json FILE]

Columns per enclosure: the largest row sum of its magnitude (bounds ||J||_inf over the box), ||mid||_2 + ||rad||_2
(bounds ||J||_2, computed in float: a comparison, not a certificate), seconds; the ratio baseline / simplex.
Layer and X0: attention layer 0 of the digits ViT and its input for the first test image (`local_realistic.py`).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from certify.attention._torch_import import from_torch_multihead_attention
from certify.bounds.local._enclosure import jacobian_enclosure, numpy_weights
from certify.bounds.local._simplex import dp_row_sums, dp_simplex_jacobian_enclosure
from certify.interval import Interval
from certify.jacobian import jacobian
from local_realistic import trained_layer


def _norms(J: Interval) -> tuple[float, float]:
    n = int(np.prod(J.shape[:2]))
    magnitude = J.mag.reshape(n, n)
    mid, rad = (0.5 * J.lo + 0.5 * J.hi).reshape(n, n), (0.5 * J.hi - 0.5 * J.lo).reshape(n, n)
    return float(magnitude.sum(1).max()), float(np.linalg.norm(mid, 2) + np.linalg.norm(rad, 2))


def _timed(f, *args):
    began = time.perf_counter()
    value = f(*args)
    return value, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=48, help="D of the digits ViT (48 or 64)")
    parser.add_argument("--eps", default="1e-2,3e-2,1e-1")
    parser.add_argument("--samples", type=int, default=200, help="random points and vertices of the box")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    layer, X0, _, description = trained_layer(args.size)
    with torch.no_grad():
        weights = from_torch_multihead_attention(layer.double()).attention_weights()
    X0 = X0.double().numpy()
    w = numpy_weights(weights)
    N, D = X0.shape
    print(f"{description}; N = {N}")
    print("| eps | interval: inf / 2 (s) | simplex: inf / 2 (s) | simplex row sums (s) | sampled max row | "
          "interval / simplex (inf) |")
    print("|---|---|---|---|---|---|")
    rows, rng = [], np.random.default_rng(0)
    for eps in (float(e) for e in args.eps.split(",")):
        box = Interval(X0 - eps, X0 + eps)
        plain, t_plain = _timed(jacobian_enclosure, box, w)
        simplex, t_simplex = _timed(dp_simplex_jacobian_enclosure, box, w)
        row_sums, t_rows = _timed(dp_row_sums, box, w)
        half = args.samples // 2
        X = X0 + eps * np.concatenate([rng.uniform(-1, 1, (half, N, D)), rng.choice([-1.0, 1.0], (half, N, D))])
        with torch.no_grad():
            J = jacobian(torch.from_numpy(X), weights).numpy().reshape(len(X), N * D, N * D)
        attained = float(np.abs(J).sum(-1).max())
        row = {"eps": eps, "interval": _norms(plain), "interval_s": t_plain, "simplex": _norms(simplex),
               "simplex_s": t_simplex, "row_sums": float(row_sums.max()), "row_sums_s": t_rows, "sampled": attained}
        rows.append(row)
        print(f"| {eps:g} | {row['interval'][0]:.4g} / {row['interval'][1]:.4g} ({t_plain:.2f}) | "
              f"{row['simplex'][0]:.4g} / {row['simplex'][1]:.4g} ({t_simplex:.2f}) | {row['row_sums']:.4g} "
              f"({t_rows:.2f}) | {attained:.4g} | {row['interval'][0] / row['simplex'][0]:.3g} |", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"layer": description, "N": N, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
