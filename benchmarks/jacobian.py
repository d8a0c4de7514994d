"""Closed-form batched Jacobian vs torch.func.jacrev, on the same inputs (issue: foundation, item 8).

For each (kind, N, D, H) it times `certify.jacobian.jacobian` and `certify.jacobian.autodiff_jacobian`
(reverse mode: one vjp vmapped over the basis vectors, chunked to bound memory, which is what jacrev does) in
float64, reports median seconds over repeats, their ratio, and the largest difference between the two Jacobians
(a correctness check in the same run). Where N D > 2048 the reverse-mode baseline runs on the first --rows output rows
only and its time is scaled by N D / rows (marked in the table): the full run would take hours.

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


def jacrev_rows(X: torch.Tensor, weights, rows: int, chunk_size: int) -> torch.Tensor:
    """The first `rows` rows of the flattened Jacobian of each batch element by reverse mode (one vjp,
    vmapped over basis vectors, chunked): jacrev restricted to those rows. rows = N D is plain jacrev."""
    single = lambda x: attention_forward(x.unsqueeze(0), weights).squeeze(0).flatten()  # noqa: E731
    out = []
    for x in X:
        _, vjp = torch.func.vjp(single, x)
        basis = torch.eye(x.numel(), dtype=x.dtype)[:rows]
        out.append(torch.cat([torch.func.vmap(vjp)(chunk)[0].flatten(1) for chunk in basis.split(chunk_size)]))
    return torch.stack(out)


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
    parser.add_argument("--rows", type=int, default=256,
                        help="where N D > 2048, run the reverse-mode baseline on this many rows and scale its time")
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
                    # reverse mode on every row up to N D = 2048; beyond, on the first --rows rows, time scaled
                    n_rows = N * D if N * D <= 2048 else min(N * D, args.rows)
                    closed_s, closed = median_seconds(lambda: jacobian(X, weights), repeats)
                    jacrev_s, reference = median_seconds(lambda: jacrev_rows(X, weights, n_rows, chunk), repeats)
                    jacrev_s *= N * D / n_rows
                    error = float((closed.flatten(3).flatten(1, 2)[:, :n_rows] - reference).abs().max())
                    note = "" if n_rows == N * D else f"scaled from {n_rows} rows"
                    rows.append((kind, N, D, H, closed_s, jacrev_s, jacrev_s / closed_s, error, note))
                    print(f"{kind} N={N} D={D} H={H}: closed {closed_s:.4f}s jacrev {jacrev_s:.4f}s "
                          f"ratio {jacrev_s / closed_s:.1f}x max|diff| {error:.1e}", file=sys.stderr)
                    del closed, reference
    header = ("kind", "N", "D", "H", "closed-form s", "jacrev s", "speed-up", "max |diff|", "jacrev timing")
    print(f"median of {args.repeats} (1 at N = 256), batch B = {args.batch}, float64, "
          f"{torch.get_num_threads()} threads")
    print(format_rows(header, rows))
    if args.json:
        write_json(args.json, {"columns": list(header), "rows": [list(r) for r in rows]})


if __name__ == "__main__":
    main()
