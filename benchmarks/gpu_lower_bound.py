"""Benchmark: the adversarial lower-bound search on the CPU and on CUDA, same layers, same time budget.

For each size (D, H, N) a fresh `torch.nn.MultiheadAttention` (seeded default init) on Ball(sqrt(D)) in the
2-norm: `certify.adversarial.lower_bound(..., seconds=budget)` on each device (float64 on the CPU, float32 on CUDA;
the value is always recomputed in float64 on the CPU at the witness). Columns: size, device, value reached,
wall seconds of the call, budget overrun (seconds / budget - 1; the promise is <= 20%), restarts per step, steps
evaluated, how the search stopped. Without CUDA it prints the CPU rows and says CUDA is absent.

The default (3 sizes x 2 devices x 20 s, plus one warm-up per device) takes about 2.5 minutes:

    python benchmarks/gpu_lower_bound.py
    python benchmarks/gpu_lower_bound.py --sizes 64x4x16,256x8x128 --seconds 10
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from certify._domain import Ball  # noqa: E402
from certify.adversarial import lower_bound  # noqa: E402
from certify.attention import as_weights  # noqa: E402
from certify.report import format_rows  # noqa: E402


def layer(D: int, H: int):
    torch.manual_seed(0)
    return as_weights(torch.nn.MultiheadAttention(D, H, batch_first=True)).to(torch.float64, "cpu")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="64x4x16,256x8x128,768x12x128", help="comma-separated DxHxN")
    parser.add_argument("--seconds", type=float, default=20.0, help="time budget of every search")
    args = parser.parse_args(argv)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    devices = [("cpu", torch.float64)]
    if torch.cuda.is_available():
        devices.append(("cuda", torch.float32))
        print(f"CUDA: {torch.cuda.get_device_name(0)}", flush=True)
    else:
        print("CUDA is absent on this machine: CPU rows only", flush=True)
    print(f"torch {torch.__version__}, CPU threads {torch.get_num_threads()}, load average "
          f"{os.getloadavg()[0]:.1f}, budget {args.seconds:g} s", flush=True)
    small = layer(8, 2)
    for device, dtype in devices:  # one-off imports and CUDA context outside the timings
        lower_bound(small, 3, "2", Ball(1.0), restarts=2, steps=2, device=device, dtype=dtype)
    rows = []
    for D, H, N in sizes:
        weights = layer(D, H)
        for device, dtype in devices:
            start = time.perf_counter()
            result = lower_bound(weights, N, "2", Ball(math.sqrt(D)), seconds=args.seconds, device=device,
                                 dtype=dtype)
            wall = time.perf_counter() - start
            evaluations = sum(result.details["evaluations"].values())
            rows.append((f"({D}, {H}, {N})", f"{device} {str(dtype).replace('torch.', '')}", f"{result.value:.6g}",
                         f"{wall:.1f}", f"{100 * (wall / args.seconds - 1):+.0f}%", result.details["free_restarts"],
                         evaluations, result.details["stopped"]))
            print(f"  ({D}, {H}, {N}) {device}: {result.value:.6g} in {wall:.1f} s", flush=True)
    print(format_rows(("(D, H, N)", "device", "value", "seconds", "overrun", "restarts", "evaluations",
                       "stopped"), rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
