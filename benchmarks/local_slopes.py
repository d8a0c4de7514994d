"""The Taylor remainder from building-block slopes (seeds "slopes", `certify/bounds/local/_slopes.py`) against the
previous default (seeds "directional": one interval forward pass with the direction B - X0 as tangent), on the
digits vision transformer's first attention layer around a real input (issue 15).

    python benchmarks/local_slopes.py [--sizes 48,64] [--eps 1e-4,1e-3,1e-2] [--exact] [--json out.json]

For each size and eps (l_inf box X0 +- eps): the remainder's slope per unit eps, in the 2-norm (||S||_2 bound,
`nonnegative_norm2_upper`) and the inf-norm (largest row sum), for both seeds, their ratio, and seconds (median of
three runs). With --exact, also the exact entrywise slope sum_m |dJ/dX_m (X0)| by autograd through the closed-form
Jacobian (float64, not rounded: a reference, not a bound), which no entrywise bound can beat.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from certify.bounds.local._enclosure import numpy_weights
from certify.bounds.local._taylor import nonnegative_norm2_upper, taylor_enclosure
from certify.experiments import attention_inputs, attention_layer, train_digits_transformer
from certify.attention import as_weights
from certify.interval import Interval
from certify.jacobian import jacobian

HEADS = {48: 3, 64: 4}


def slopes(remainder: Interval, eps: float) -> tuple[float, float]:
    n = int(np.sqrt(remainder.lo.size))
    R = np.maximum(np.abs(remainder.lo), np.abs(remainder.hi)).reshape(n, n)
    return nonnegative_norm2_upper(R) / eps, float(R.sum(1).max()) / eps


def exact_slopes(weights, X0: torch.Tensor) -> tuple[float, float]:
    """sum_m |dJ/dX_m (X0)| by forward-mode autograd, 16 coordinates at a time."""
    N, D = X0.shape
    n = N * D
    total = torch.zeros(n, n, dtype=torch.float64)
    for start in range(0, n, 16):
        for m in range(start, min(start + 16, n)):
            tangent = torch.zeros(n, dtype=torch.float64)
            tangent[m] = 1.0
            _, dJ = torch.func.jvp(lambda X: jacobian(X[None], weights)[0], (X0,), (tangent.reshape(N, D),))
            total += dJ.reshape(n, n).abs()
    R = total.numpy()
    return nonnegative_norm2_upper(R), float(R.sum(1).max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="48")
    parser.add_argument("--eps", default="1e-4,1e-3,1e-2")
    parser.add_argument("--exact", action="store_true", help="also the exact entrywise slope (autograd, slow)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = []
    print("| D | eps | slopes: 2 / inf per unit eps | directional: 2 / inf | directional / slopes (2, inf) "
          "| s slopes | s directional |")
    print("|---|---|---|---|---|---|---|")
    for D in [int(s) for s in args.sizes.split(",")]:
        result = train_digits_transformer(D=D, H=HEADS[D], layers=3, epochs=15, seed=0)
        layer = attention_layer(result.model, 0).eval()
        X0 = attention_inputs(result.model, result.test_images[:1], 0)[0].double()
        weights = as_weights(layer).to(torch.float64, "cpu")
        nw, x0 = numpy_weights(weights), X0.numpy()
        if args.exact:
            exact = exact_slopes(weights, X0)
            print(f"<!-- D = {D}: exact entrywise slope (autograd) 2 / inf = {exact[0]:.1f} / {exact[1]:.1f} -->")
        for eps in [float(e) for e in args.eps.split(",")]:
            box = Interval(x0 - eps, x0 + eps)
            row = {"D": D, "eps": eps}
            for seeds in ("slopes", "directional"):
                times, form = [], None
                for _ in range(3):
                    began = time.perf_counter()
                    form = taylor_enclosure(box, x0, nw, seeds=seeds)
                    times.append(time.perf_counter() - began)
                row[seeds] = slopes(form.remainder, eps)
                row[f"{seeds}_seconds"] = statistics.median(times)
            ratio = (row["directional"][0] / row["slopes"][0], row["directional"][1] / row["slopes"][1])
            row["ratio"] = ratio
            rows.append(row)
            print(f"| {D} | {eps:g} | {row['slopes'][0]:.0f} / {row['slopes'][1]:.0f} | {row['directional'][0]:.0f} / "
                  f"{row['directional'][1]:.0f} | {ratio[0]:.1f} / {ratio[1]:.1f} | {row['slopes_seconds']:.1f} "
                  f"| {row['directional_seconds']:.1f} |", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
