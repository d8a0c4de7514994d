"""Is every time budget honoured? `certify_layer` with its default methods on eps-balls and balls, per size, each
method's seconds against time_budget (issue 15, item 6: within 20% at every size); the baseline in the same run is
the taylor pass with no budget (its seconds and value), where it fits in --baseline-max seconds by its prediction.

Layers: a default-initialised torch.nn.MultiheadAttention (float64) per size; X0: LayerNorm of Gaussian tokens.
Columns: each certificate's method and seconds / budget, the worst of them, the wall time of the whole call and its
number of budgeted slots (bnb, taylor or the streamed form in its place, the lower-bound search: each may use the
budget), what was skipped, and the taylor baseline.

    PYTHONPATH=. python benchmarks/budgets.py [--sizes 48:3:17,64:4:32,64:4:64] [--budget 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time

from streamed import fresh_layer

import certify
from certify._domain import EpsBall
from certify.attention import as_weights
from certify.bounds.local._taylor import predicted_seconds, resolve_seeds, taylor_bound

SIZES = "48:3:17,64:4:32,128:4:16,64:4:64,256:8:128"
BUDGETED = ("bnb", "taylor", "streamed", "adversarial")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=SIZES, help="comma-separated D:H:N")
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--eps", type=float, default=1e-2, help="the eps-ball's radius (l_inf)")
    parser.add_argument("--norms", default="inf,2")
    parser.add_argument("--ball", action="store_true", help="also the token ball of radius sqrt(D)")
    parser.add_argument("--baseline-max", type=float, default=120.0,
                        help="run the unbudgeted taylor pass where its prediction is at most this (s)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    rows = []
    print(f"{'D':>4} {'H':>3} {'N':>4} {'domain':>8} {'norm':>4} {'methods (s / budget)':<56} {'worst':>6} "
          f"{'call s':>7} {'slots':>5} {'taylor no budget: value':>24} {'s':>6}  skipped")
    for size in args.sizes.split(","):
        D, H, N, layer, X0 = fresh_layer(size)
        weights = as_weights(layer)
        domains = [("eps", dict(center=X0, eps=args.eps))] + ([("ball", dict(radius=D**0.5))] if args.ball else [])
        for name, domain in domains:
            for norm in args.norms.split(","):
                begin = time.perf_counter()
                report = certify.certify_layer(layer, tokens=N, norm=norm, time_budget=args.budget, **domain)
                call = time.perf_counter() - begin
                shares = {c.method: c.seconds / args.budget for c in report.certificates}
                local = ("taylor", "streamed")  # taylor, or the streamed form in its place: one slot
                slots = len({"local" if c.method in local else c.method
                             for c in report.certificates if c.method in BUDGETED}
                            | ({"local"} if any(line.startswith(local) for line in report.skipped) else set()))
                baseline, baseline_seconds = None, None
                if name == "eps":
                    seeds = resolve_seeds("auto", N, D, weights.kind)
                    if sum(predicted_seconds(N, D, H, norm, seeds)) <= args.baseline_max:
                        begin = time.perf_counter()
                        baseline = taylor_bound(weights, N, norm, EpsBall(X0, args.eps, "inf")).value
                        baseline_seconds = time.perf_counter() - begin
                worst = max(shares[m] for m in shares if m in BUDGETED)
                methods = " ".join(f"{m} {shares[m]:.2f}" for m in shares)
                print(f"{D:>4} {H:>3} {N:>4} {name:>8} {norm:>4} {methods:<56} {worst:>6.2f} {call:>7.1f} {slots:>5} "
                      f"{'-' if baseline is None else f'{baseline:.4g}':>24} "
                      f"{'-' if baseline_seconds is None else f'{baseline_seconds:.1f}':>6}  "
                      f"{'; '.join(report.skipped)}", flush=True)
                rows.append(dict(D=D, H=H, N=N, domain=name, norm=norm, budget=args.budget, call_seconds=call,
                                 slots=slots, worst_share=worst, skipped=list(report.skipped),
                                 certificates=[dict(method=c.method, value=c.value, seconds=c.seconds,
                                                    certified=c.certified) for c in report.certificates],
                                 taylor_no_budget=baseline, taylor_no_budget_seconds=baseline_seconds))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=2)


if __name__ == "__main__":
    main()
