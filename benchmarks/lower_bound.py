"""Benchmark: certify's adversarial search against the naive baseline, same run, same time budget.

The baseline (`certify.adversarial.naive_lower_bound`) is Adam on ``torch.func.jacrev`` with
``torch.linalg.matrix_norm``, one restart at a time. For each N, norm and time budget this prints the best lower
bound each reaches (both recomputed in float64 at their witnesses), and the throughput of each objective in
Jacobian-norm evaluations (value and gradient) per second, measured separately for ``--rate-seconds``:

- ours: the batched objective the search's free phase uses (row block 0 for the inf-norm, exact SVD or matrix-free
  power iteration for the 2-norm), ``--restarts`` inputs per step;
- naive: one jacrev Jacobian and matrix_norm per step.

Usage (the default runs in about 4 minutes on 2 CPU cores):

    python benchmarks/lower_bound.py                                  # N = 4, 16, 64, 256; 10 s per run
    python benchmarks/lower_bound.py --seconds 10,60,300 --tokens 16,256 --json out/bench.json
    python benchmarks/lower_bound.py --device cuda --dtype float32

``--biased`` instead measures how far the default budget is from a long run on the biased layer of issue 15
(`torch.nn.MultiheadAttention` D = 4, H = 2, N = 4, seeded weights and N(0, 0.5^2) biases, Ball(3), 2-norm), for
this checkout and, with ``--baseline-checkout DIR``, for another checkout in the same run (each in a subprocess
with ``PYTHONPATH=DIR``): columns default budget / long run / ratio, median over ``--seeds``.

    python benchmarks/lower_bound.py --biased --baseline-checkout ../certify-main --seeds 0,1,2 --seconds 10,60
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from certify._domain import Global  # noqa: E402
from certify.adversarial import config_weights, lower_bound, naive_lower_bound, natural_scale  # noqa: E402
from certify.adversarial._search import _objective, default_device  # noqa: E402
from certify.attention import attention_forward  # noqa: E402
from certify.report import format_rows, write_json  # noqa: E402


def rate_ours(weights, N: int, norm: str, restarts: int, seconds: float, device, dtype) -> float:
    """Evaluations (value + gradient + Adam step) per second of the search's batched free-phase objective."""
    w = weights.to(dtype, device)
    generator = torch.Generator().manual_seed(0)
    X = (torch.randn(restarts, N, w.D, generator=generator, dtype=torch.float64) * natural_scale(weights))
    X = X.to(dtype=dtype, device=device).requires_grad_(True)
    objective = _objective(w, norm, Global(), X.shape, generator)
    optimizer = torch.optim.Adam([X], lr=1e-3)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or count == 0:
        values = objective(X)
        optimizer.zero_grad()
        (-values.sum()).backward()
        optimizer.step()
        count += restarts
    if device.type == "cuda":
        torch.cuda.synchronize()
    return count / (time.perf_counter() - start)


def rate_naive(weights, N: int, norm: str, seconds: float, device, dtype) -> float:
    w = weights.to(dtype, device)
    X = (torch.randn(N, w.D, dtype=torch.float64) * natural_scale(weights)).to(dtype=dtype, device=device)
    X.requires_grad_(True)
    single = lambda x: attention_forward(x[None], w)[0]  # noqa: E731
    optimizer = torch.optim.Adam([X], lr=1e-3)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or count == 0:
        J = torch.func.jacrev(single)(X).reshape(N * w.D, N * w.D)
        value = torch.linalg.matrix_norm(J, ord=2 if norm == "2" else math.inf)
        optimizer.zero_grad()
        (-value).backward()
        optimizer.step()
        count += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    return count / (time.perf_counter() - start)


BIASED_SNIPPET = """
import json, sys, torch
from certify._domain import Ball
from certify.adversarial import lower_bound
from certify.attention import as_weights
torch.manual_seed(0)
layer = torch.nn.MultiheadAttention(4, 2, bias=True, batch_first=True).double()
g = torch.Generator().manual_seed(1)
with torch.no_grad():
    layer.in_proj_bias.copy_(0.5 * torch.randn(12, generator=g, dtype=torch.float64))
    layer.out_proj.bias.copy_(0.5 * torch.randn(4, generator=g, dtype=torch.float64))
weights = as_weights(layer)
lower_bound(weights, 3, "2", Ball(1.0), restarts=2, steps=2)  # one-off imports outside the timings
out = {}
for seed in json.loads(sys.argv[1]):
    for budget in json.loads(sys.argv[2]):
        result = lower_bound(weights, 4, "2", Ball(3.0), seed=seed, seconds=budget)
        out[f"{seed}/{budget}"] = [result.value, result.seconds]
print(json.dumps(out))
"""


def biased(checkouts: list[str], seeds: list[int], budgets: list[float]) -> None:
    """Default budget vs long run on the biased D = 4 layer, per checkout, in subprocesses (module docstring)."""
    import json
    import statistics
    import subprocess

    rows = []
    for checkout in checkouts:
        env = {**os.environ, "PYTHONPATH": checkout}
        done = subprocess.run([sys.executable, "-c", BIASED_SNIPPET, json.dumps(seeds), json.dumps(budgets)],
                              env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{checkout}: {done.stderr[-2000:]}")
        values = json.loads(done.stdout.strip().splitlines()[-1])
        for seed in seeds:
            short, long = values[f"{seed}/{budgets[0]}"], values[f"{seed}/{budgets[-1]}"]
            rows.append((checkout, seed, f"{short[0]:.4f}", f"{long[0]:.4f}", f"{long[0] / short[0]:.3f}",
                         f"{short[1]:.1f}", f"{long[1]:.1f}"))
        shorts = [values[f"{s}/{budgets[0]}"][0] for s in seeds]
        longs = [values[f"{s}/{budgets[-1]}"][0] for s in seeds]
        rows.append((checkout, "median", f"{statistics.median(shorts):.4f}", f"{statistics.median(longs):.4f}",
                     f"{statistics.median(longs) / statistics.median(shorts):.3f}", "", ""))
        print(f"  {checkout}: done", flush=True)
    print(format_rows(("checkout", "seed", f"default {budgets[0]:g} s", f"long {budgets[-1]:g} s",
                       "long / default", "default s", "long s"), rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=("unit", "multihead"), default="unit")
    parser.add_argument("--tokens", default="4,16,64,256", help="comma-separated N")
    parser.add_argument("--norm", choices=("2", "inf", "both"), default="both")
    parser.add_argument("--seconds", default="10", help="comma-separated time budgets (checkpoints), e.g. 10,60,300")
    parser.add_argument("--rate-seconds", type=float, default=3.0, help="time per throughput measurement")
    parser.add_argument("--restarts", type=int, default=24)
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--biased", action="store_true", help="default budget vs long run on the biased D = 4 layer")
    parser.add_argument("--baseline-checkout", help="with --biased: also run this checkout (e.g. a clone of an older commit)")
    parser.add_argument("--seeds", default="0,1,2", help="with --biased: comma-separated seeds")
    args = parser.parse_args(argv)
    if args.biased:
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        checkouts = ([args.baseline_checkout] if args.baseline_checkout else []) + [os.path.abspath(here)]
        biased(checkouts, [int(s) for s in args.seeds.split(",")], [float(s) for s in args.seconds.split(",")])
        return 0
    device = default_device() if args.device is None else torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    weights = config_weights(args.config)
    norms = ("inf", "2") if args.norm == "both" else (args.norm,)
    budgets = [float(s) for s in args.seconds.split(",")]
    rows, records = [], []
    print(f"device {device}, dtype {args.dtype}, config {args.config}, threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    lower_bound(weights, 3, "2", restarts=2, steps=2, device=device)  # one-off imports outside the timings
    for N in [int(n) for n in args.tokens.split(",")]:
        for norm in norms:
            ours_rate = rate_ours(weights, N, norm, args.restarts, args.rate_seconds, device, dtype)
            naive_rate = rate_naive(weights, N, norm, args.rate_seconds, device, dtype)
            for budget in budgets:
                ours = lower_bound(weights, N, norm, restarts=args.restarts, seconds=budget, device=device,
                                   dtype=dtype)
                naive = naive_lower_bound(weights, N, norm, budget, device=device, dtype=dtype)
                rows.append((N, norm, f"{budget:g}", ours.value, naive.value, f"{ours.value / naive.value:.4f}",
                             f"{ours_rate:.4g}", f"{naive_rate:.4g}", f"{ours_rate / naive_rate:.1f}x",
                             f"{ours.seconds:.1f}", ours.details["found_in"]))
                records.append({"N": N, "norm": norm, "seconds": budget, "ours": ours.value, "naive": naive.value,
                                "ours_rate": ours_rate, "naive_rate": naive_rate, "ours_seconds": ours.seconds,
                                "naive_seconds": naive.seconds, "naive_restarts": naive.restarts,
                                "found_in": ours.details["found_in"], "evaluations": ours.details["evaluations"]})
                print(f"  N={N} {norm}-norm {budget:g}s: ours {ours.value:.6g}, naive {naive.value:.6g}", flush=True)
    header = ("N", "norm", "budget s", "ours", "naive", "ours/naive", "ours eval/s", "naive eval/s", "speed-up",
              "ours s", "found in")
    print(format_rows(header, rows))
    if args.json:
        write_json(args.json, {"device": str(device), "dtype": args.dtype, "config": args.config, "rows": records})
    return 0


if __name__ == "__main__":
    sys.exit(main())
