"""Local certificates on trained attention layers around real inputs (issue 15): every certified method of
`certify_layer` (ours), Castin et al. on the per-token ball containing the domain, auto_LiRPA's Jacobian bounds
where they run, the best attained lower bound, their ratio, seconds and the process's peak memory.

    python benchmarks/local_realistic.py [--sizes 48,64,256,768] [--eps 1e-3,1e-2,1e-1] [--norms 2,inf]
                                         [--budget 20] [--tokens N] [--json out.json]
    python benchmarks/local_realistic.py --sizes 48 --tokens 5 --no-ln-ball   # where auto_LiRPA runs (N D = 240)
    python benchmarks/local_realistic.py --sizes 48,64 --eps '' --no-lirpa   # the LayerNorm ball rows only

Layers: attention layer 0 of the digits vision transformer (`certify.experiments.train_digits_transformer`, N = 17
tokens, q/k/v/out biases) trained here at D = 48 (H = 3), 64 (H = 4) and 256 (H = 8); at D = 768 (H = 12, N = 128,
BERT-base size) a default-initialised `torch.nn.MultiheadAttention` (not trained: say so) on LayerNorm outputs of
Gaussian tokens. Inputs X0: the layer's real inputs (LayerNorm outputs) for the first test image. Domains: the
l_inf eps-balls around X0 and the LayerNorm ball (every token in ||x_i|| <= R_LN, the radius every LayerNorm output
of the layer satisfies).

Baselines in the same run: Castin et al. (the published local bound for DP attention) and, for N D <= 256,
auto_LiRPA CROWN on the closed-form Jacobian (float64, not outward-rounded, so not labelled certified; one enclosure
per eps-ball, about 30 s at N D = 240, its inf-norm exact and its 2-norm by the "baseline" enclosure norm: the SDP
took over 10 minutes there). ``--tokens N`` keeps the first N tokens of X0 (the same layer on a shorter sequence),
so that auto_LiRPA runs on the trained layers. Peak memory is the process's peak resident set so far (monotone:
rows run from small to large).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time

import torch

import certify
from certify import Ball, EpsBall
from certify.experiments import attention_inputs, attention_layer, layer_norm_radius, train_digits_transformer

HEADS = {48: 3, 64: 4, 256: 8, 768: 12}


def peak_memory_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def trained_layer(D: int, seed: int = 0) -> tuple[torch.nn.MultiheadAttention, torch.Tensor, float, str]:
    """(layer, X0, R_LN, description) for the benchmark's size D."""
    if D == 768:
        torch.manual_seed(seed)
        layer = torch.nn.MultiheadAttention(768, 12, batch_first=True)
        X0 = torch.nn.functional.layer_norm(torch.randn(128, 768), (768,))
        return layer.eval(), X0, math.sqrt(768) * (1 + 1e-6), "nn.MultiheadAttention(768, 12), default init (untrained)"
    epochs = 15 if D <= 64 else 4
    result = train_digits_transformer(D=D, H=HEADS[D], layers=3 if D <= 64 else 1, epochs=epochs, seed=seed)
    X0 = attention_inputs(result.model, result.test_images[:1], 0)[0]
    description = f"digits ViT layer 0, D = {D}, H = {HEADS[D]}, test accuracy {result.test_accuracy:.3f}"
    return attention_layer(result.model, 0).eval(), X0, layer_norm_radius(result.model, 0), description


LIRPA_MAX_ENTRIES = 256
"""auto_LiRPA's Jacobian enclosure only where N D is at most this (about 30 s at 240; its cost grows fast)."""
_LIRPA_BOUNDS: dict[tuple[int, float], object] = {}


def lirpa_value(layer, X0: torch.Tensor, eps: float, norm: str) -> float | None:
    if X0.numel() > LIRPA_MAX_ENTRIES:
        return None
    from certify.lirpa import jacobian_bounds, lirpa_lipschitz

    key = (id(layer), eps)
    if key not in _LIRPA_BOUNDS:  # one enclosure per eps-ball, for both norms
        _LIRPA_BOUNDS[key] = jacobian_bounds(layer, X0.double(), eps, "inf", "CROWN", None)
    return lirpa_lipschitz(layer, X0.double(), eps, "inf", norm=norm, norm2="baseline",
                           bounds=_LIRPA_BOUNDS[key]).value


def run_row(layer, X0: torch.Tensor, domain, norm: str, budget: float, lirpa: bool) -> dict:
    start = time.perf_counter()
    report = certify.certify_layer(layer, norm=norm, domain=domain, time_budget=budget,
                                   tokens=X0.shape[0] if not isinstance(domain, EpsBall) else None)
    seconds = time.perf_counter() - start
    uppers = {c.method: c.value for c in report.certificates if c.kind == "upper" and c.certified}
    best, lower = report.best_upper(), report.best_lower()
    for method, value in uppers.items():
        assert value >= lower.value, f"{method} = {value} is below the attained {lower.value}"
    row = {
        "domain": report.domain, "norm": norm, "best": best.value, "best_method": best.method,
        "castin": uppers.get("castin"), "uppers": uppers, "lower": lower.value,
        "ratio": best.value / lower.value, "castin_ratio": uppers.get("castin", math.nan) / lower.value,
        "seconds": seconds, "peak_gib": peak_memory_gib(),
    }
    if lirpa and isinstance(domain, EpsBall):
        row["lirpa"] = lirpa_value(layer, X0, domain.eps, norm)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="48,64,256,768", help="embedding sizes D (from 48, 64, 256, 768)")
    parser.add_argument("--eps", default="1e-3,1e-2,1e-1", help="l_inf eps-ball radii around X0 ('' for none)")
    parser.add_argument("--norms", default="2,inf")
    parser.add_argument("--no-ln-ball", action="store_true", help="skip the LayerNorm ball rows")
    parser.add_argument("--budget", type=float, default=20.0, help="time budget of each searching method (s)")
    parser.add_argument("--no-lirpa", action="store_true")
    parser.add_argument("--tokens", type=int, default=None, help="keep the first N tokens of X0 (default: all)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = []
    print("| layer | N | domain | norm | ours (method) | Castin | auto_LiRPA | lower | ours/lower | Castin/lower "
          "| s | peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for D in [int(s) for s in args.sizes.split(",")]:
        layer, X0, radius, description = trained_layer(D)
        X0 = X0 if args.tokens is None else X0[:args.tokens]
        print(f"<!-- D = {D}: {description}; N = {X0.shape[0]}, R_LN = {radius:.4g} -->", flush=True)
        domains = [EpsBall(X0.double(), float(eps), "inf") for eps in args.eps.split(",") if eps]
        if not args.no_ln_ball:
            domains.append(Ball(radius))
        for domain in domains:
            for norm in args.norms.split(","):
                row = run_row(layer, X0, domain, norm, args.budget, not args.no_lirpa)
                row.update(D=D, N=X0.shape[0], layer=description)
                rows.append(row)
                lirpa = row.get("lirpa")
                print(f"| D={D} | {row['N']} | {row['domain']} | {norm} | {row['best']:.4g} ({row['best_method']}) "
                      f"| {row['castin']:.4g} | {'-' if lirpa is None else f'{lirpa:.4g}'} | {row['lower']:.4g} "
                      f"| {row['ratio']:.3f} | {row['castin_ratio']:.3g} | {row['seconds']:.1f} "
                      f"| {row['peak_gib']:.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
