"""The `streamed` local bound (certify/bounds/local/_streamed.py) at sizes the `taylor` method cannot hold, against
Castin et al.'s bound (the only other method that answers there) in the same run.

Layers: a default-initialised torch.nn.MultiheadAttention (float64) per size; X0: LayerNorm of Gaussian tokens;
the eps-ball about X0. Columns: streamed, castin, the attained value at the centre (||J(X0)||: the exact row l1 norm
for the inf-norm, power iteration for the 2-norm), ratio streamed / attained, castin / streamed, seconds, peak
memory of the process.

    PYTHONPATH=. python benchmarks/streamed.py --sizes 64:4:128 --eps 1e-3 --norms inf,2 [--json FILE]
    PYTHONPATH=. python benchmarks/streamed.py --sizes 768:12:128 --eps 1e-3 --norms inf   # BERT size, ~6 min
    PYTHONPATH=. python benchmarks/streamed.py --budget 60 --one-box   # slope sums over nested boxes vs one box

With --budget B the method gets time_budget = B: the slope sums are averaged over as many nested boxes as fit
(`steps`); --one-box adds the one-box pass (no budget, as before) as a baseline column in the same run.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

from certify._domain import EpsBall
from certify.attention import as_weights
from certify.bounds.closed_form import castin_bound
from certify.bounds.local._streamed import streamed_bound


def fresh_layer(size: str) -> tuple[int, int, int, torch.nn.MultiheadAttention, torch.Tensor]:
    """(D, H, N, layer, X0) for "D:H:N": a default-initialised nn.MultiheadAttention (float64, seed 0) and the
    LayerNorm of N Gaussian tokens."""
    D, H, N = (int(x) for x in size.split(":"))
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(D, H, batch_first=True).double()
    X0 = torch.nn.functional.layer_norm(torch.randn(N, D, dtype=torch.float64), (D,))
    return D, H, N, layer, X0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="64:4:128", help="comma-separated D:H:N")
    parser.add_argument("--eps", default="1e-3", help="comma-separated radii")
    parser.add_argument("--norms", default="inf,2")
    parser.add_argument("--budget", type=float, default=None, help="time_budget of the streamed method (s)")
    parser.add_argument("--one-box", action="store_true", help="also the one-box pass (the baseline of --budget)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    rows = []
    print(f"{'D':>4} {'H':>3} {'N':>4} {'norm':>4} {'eps':>7} {'streamed':>11} {'castin':>11} {'attained':>10} "
          f"{'ratio':>7} {'castin/ours':>11} {'s':>7} {'peak GiB':>8} {'steps':>5} {'one box':>9} {'s':>6}")
    for size in args.sizes.split(","):
        D, H, N, layer, X0 = fresh_layer(size)
        weights = as_weights(layer)
        for norm in args.norms.split(","):
            for eps in (float(e) for e in args.eps.split(",")):
                domain = EpsBall(X0, eps, norm)
                begin = time.perf_counter()
                ours = streamed_bound(weights, N, norm, domain, time_budget=args.budget)
                seconds = time.perf_counter() - begin
                one_box, one_box_seconds = None, None
                if args.one_box:
                    begin = time.perf_counter()
                    one_box = streamed_bound(weights, N, norm, domain).value
                    one_box_seconds = time.perf_counter() - begin
                castin = castin_bound(weights, N, domain.enclosing_ball().radius, norm).value
                row = {"D": D, "H": H, "N": N, "norm": norm, "eps": eps, "streamed": ours.value, "castin": castin,
                       "attained": ours.details["lower"], "ratio": ours.details["ratio"],
                       "castin_over_streamed": castin / ours.value, "seconds": seconds,
                       "peak_GiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                       "steps": ours.details["steps"], "one_box": one_box, "one_box_seconds": one_box_seconds}
                rows.append(row)
                print(f"{D:>4} {H:>3} {N:>4} {norm:>4} {eps:>7.0e} {ours.value:>11.5g} {castin:>11.5g} "
                      f"{row['attained']:>10.5g} {row['ratio']:>7.3f} {row['castin_over_streamed']:>11.4g} "
                      f"{seconds:>7.1f} {row['peak_GiB']:>8.2f} {row['steps']:>5} "
                      f"{'-' if one_box is None else f'{one_box:.5g}':>9} "
                      f"{'-' if one_box is None else f'{one_box_seconds:.1f}':>6}", flush=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=2)


if __name__ == "__main__":
    main()
