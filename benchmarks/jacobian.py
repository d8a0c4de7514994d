"""Closed-form batched Jacobian vs torch.func.jacrev, on the same inputs (issue: foundation, item 8).

For each (kind, N, D, H) it times `certify.jacobian.jacobian` and `certify.jacobian.autodiff_jacobian`
(jacrev, vmapped over the batch, chunked to bound memory) in float64, reports median seconds over repeats, their
ratio, and the largest difference between the two Jacobians (a correctness check in the same run).

    python benchmarks/jacobian.py                # the full grid: N in {16, 64, 256}, D in {8, 32}, H in {1, 4}
    python benchmarks/jacobian.py --quick        # N in {16, 64} only
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from problems import random_weights  # noqa: E402

from certify.attention import attention_forward  # noqa: E402
from certify.jacobian import jacobian  # noqa: E402
from certify.report import format_rows, write_json  # noqa: E402


def jacrev_jacobian(X: torch.Tensor, weights, chunk_size: int) -> torch.Tensor:
    single = lambda x: attention_forward(x.unsqueeze(0), weights).squeeze(0)  # noqa: E731
    return torch.stack([torch.func.jacrev(single, chunk_size=chunk_size)(x) for x in X])


def median_seconds(function, repeats: int) -> tuple[float, torch.Tensor]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N in {16, 64} only")
    parser.add_argument("--batch", type=int, default=2, help="inputs per call (B)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kinds", nargs="+", default=["l2", "dp"])
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    for kind in args.kinds:
        for N in (16, 64) if args.quick else (16, 64, 256):
            for D in (8, 32):
                for H in (1, 4):
                    weights = random_weights(kind, H, D // H, bias=(kind == "dp"), seed=N + D + H)
                    X = torch.randn(args.batch, N, D, dtype=torch.float64)
                    chunk = max(1, min(N * D, 2**22 // (N * N * H)))
                    repeats = args.repeats if N < 256 else 1
                    closed_s, closed = median_seconds(lambda: jacobian(X, weights), repeats)
                    jacrev_s, reference = median_seconds(lambda: jacrev_jacobian(X, weights, chunk), repeats)
                    error = float((closed - reference).abs().max())
                    rows.append((kind, N, D, H, closed_s, jacrev_s, jacrev_s / closed_s, error))
                    print(f"{kind} N={N} D={D} H={H}: closed {closed_s:.4f}s jacrev {jacrev_s:.4f}s "
                          f"ratio {jacrev_s / closed_s:.1f}x max|diff| {error:.1e}", file=sys.stderr)
                    del closed, reference
    header = ("kind", "N", "D", "H", "closed-form s", "jacrev s", "speed-up", "max |diff|")
    print(f"median of {args.repeats} (1 at N = 256), batch B = {args.batch}, float64, "
          f"{torch.get_num_threads()} threads")
    print(format_rows(header, rows))
    if args.json:
        write_json(args.json, {"columns": list(header), "rows": [list(r) for r in rows]})


if __name__ == "__main__":
    main()
