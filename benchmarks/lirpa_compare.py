"""Bound propagation (auto_LiRPA IBP / CROWN) beside our Lipschitz certificates on the same layers and balls.

For each size N = D in --sizes (or the full grid with --grid), each kind (dot-product and tied L2 attention, H = 2,
seeded random weights), each ball norm p and each eps, around a seeded centre X0 with unit-norm tokens, print one
row per method with its bound on Lip_p over the ball (if it has one), its bound on max ||F(X) - F(X0)||_p over the
ball, and its seconds (`certify.lirpa.compare_layer`). The "attained (PGD)" row is a lower bound for all others.

The CROWN Jacobian enclosure costs about (N D)^2 N^2 d per layer; above --jacobian-max-n (N D) the IBP enclosure is
used instead (labelled auto_LiRPA-IBP-Jacobian). The 2-norm of that enclosure uses the certified SDP up to
N D = 32 and min(||J_c|| + ||R||, || |J_c| + R ||) beyond.

    python benchmarks/lirpa_compare.py                       # N = D in {4, 8, 16}, p in {inf, 2}, eps in {0.01, 0.1}
    python benchmarks/lirpa_compare.py --sizes 4 --eps 0.05 --json out.json

With --radii K it instead trains the toy classifiers of `certify.experiments` (L2 and dot-product attention,
seeded, seconds each) and compares certified l_2 and l_inf radii on K test sequences: CROWN by bisection against
Lipschitz margins (global for L2, Castin for DP, and our local branch and bound), mean radius and time per input
(`certify.lirpa.compare_classifier`).

    python benchmarks/lirpa_compare.py --radii 20 --eps 0.05 0.1
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch

from certify.attention import DotProductMultiheadAttention, L2MultiheadAttention
from certify.experiments import classifier_batch, train_classifier
from certify.lirpa import compare_classifier, compare_layer
from certify.report import format_rows, write_json


def layer(kind: str, D: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    cls = DotProductMultiheadAttention if kind == "dp" else L2MultiheadAttention
    return cls(D, 2, dtype=torch.float64, generator=generator).attention_weights()


def centre(N: int, D: int, seed: int) -> torch.Tensor:
    X0 = torch.randn(N, D, generator=torch.Generator().manual_seed(1000 + seed), dtype=torch.float64)
    return X0 / X0.norm(dim=1, keepdim=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--grid", action="store_true", help="all pairs (N, D) from --sizes, not only N = D")
    parser.add_argument("--kinds", nargs="+", default=["dp", "l2"], choices=["dp", "l2"])
    parser.add_argument("--norms", nargs="+", default=["inf", "2"], choices=["inf", "2"])
    parser.add_argument("--eps", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--time-budget", type=float, default=5.0, help="seconds for our branch and bound per ball")
    parser.add_argument("--jacobian-max-n", type=int, default=64, help="largest N D for the CROWN Jacobian")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--radii", type=int, default=0, metavar="K",
                        help="compare certified radii of the toy classifiers on K test inputs instead")
    parser.add_argument("--json", help="also write every row to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.radii:
        return radii(args)
    sizes = list(itertools.product(args.sizes, args.sizes)) if args.grid else [(s, s) for s in args.sizes]
    header = ("N", "D", "kind", "p", "eps", "method", "Lip bound", "output bound", "certified", "seconds")
    table, rows = [], []
    for (N, D), kind, p, eps in itertools.product(sizes, args.kinds, args.norms, args.eps):
        n = N * D
        results = compare_layer(layer(kind, D, args.seed), centre(N, D, args.seed), eps, p,
                                time_budget=args.time_budget, norm2="sdp" if n <= 32 else "cheap",
                                jacobian_method="CROWN" if n <= args.jacobian_max_n else "IBP")
        for r in results:
            certified = "lower" if r.kind == "lower" else ("yes" if r.certified else "float64")
            table.append((N, D, kind, p, f"{eps:g}", r.method, "-" if r.lipschitz is None else r.lipschitz,
                          r.deviation, certified, f"{r.seconds:.2f}"))
            rows.append({"N": N, "D": D, "attention": kind, **r.as_row()})
            print("\t".join(str(c) for c in table[-1]), file=sys.stderr, flush=True)
    print(format_rows(header, table))
    if args.json:
        write_json(args.json, {"rows": rows})
    return 0


def radii(args: argparse.Namespace) -> int:
    header = ("kind", "test acc", "p", "method", "mean radius", *(f"cert. acc @ {e:g}" for e in args.eps),
              "certified", "s / input")
    table, rows = [], []
    for kind in args.kinds:
        model, accuracy = train_classifier(kind, seed=args.seed)
        X, labels = classifier_batch(model.task, args.radii, torch.Generator().manual_seed(args.seed + 1))
        for p in args.norms:
            for s in compare_classifier(model, X, labels, p, args.eps, time_budget=args.time_budget):
                table.append((kind, f"{accuracy:.3f}", p, s.method, s.mean_radius,
                              *(f"{s.certified_accuracy[e]:.2f}" for e in args.eps),
                              "yes" if s.certified else "float64", f"{s.seconds_per_input:.3f}"))
                rows.append({"attention": kind, "test_accuracy": accuracy, **s.as_row()})
                print("\t".join(str(c) for c in table[-1]), file=sys.stderr, flush=True)
    print(format_rows(header, table))
    if args.json:
        write_json(args.json, {"radii": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
