"""Issue 15's first table and its "At larger sizes it stops working" bullets, re-measured on today's code.

For every row of that table and bullet list this rebuilds the layer and domain, runs `certify.certify_layer` the way
a user would (default methods, default `time_budget` of 10 s unless the issue's row says "20 s"), and prints one
markdown table: the issue's numbers ("before", measured on an older version of the code and hard-coded here from
the issue text), today's best certified upper bound (and the method that gave it), today's best lower bound, both
ratios, the improvement (before ratio / now ratio), wall seconds, the peak resident memory during the row, and the
command that reproduces the row alone.

    python benchmarks/issue15_table.py [--rows NAME[,NAME]] [--budget SECONDS] [--json FILE] [--quiet]

Layers (what the issue does not say was picked as the obvious choice, not tuned):

- ``demo-*``: the `certify demo` DP layer: `train_toy_layer("dp", ToyTask(), seed=0)` (N = D = 8, H = 2), Ball(3).
  `certify demo` itself uses a 5 s budget; here the default 10 s, as for every other row.
- ``d4-*``: the biased D = 4 layer of `benchmarks/lower_bound.py --biased`: ``torch.manual_seed(0)``,
  ``nn.MultiheadAttention(4, 2, bias=True)`` in float64, then in/out projection biases N(0, 0.5^2) from a
  generator seeded 1; N = 4, Ball(1) and Ball(3).
- ``vit-*``: the digits vision transformer of `certify.experiments` with its defaults
  (`train_digits_transformer()`: D = 48, H = 3, 3 layers, 15 epochs, seed 0; the layer of `local_realistic.py`).
  ``vit-n5-*``: attention layer 0 on N = 5 tokens, Ball(3), 20 s. ``vit-n17-layer{0,1,2}``: each of the three
  attention layers on N = 17 tokens, Ball(2.75), 20 s (the issue gives one range over the three layers, so each row
  shows that range as "before"). ``vit-eps*``: layer 0 on the l_inf eps-ball around X0 = the first 5 rows (class
  token and the first 4 patches) of layer 0's real input for the first test image, eps = 0.01 and 0.1, 20 s.
- ``dp64-*``, ``dp64-n64``, ``bert``, ``budget-*``: fresh default-initialised ``nn.MultiheadAttention``
  (``torch.manual_seed(0)`` before construction). The issue gives no radius for N = 64 / BERT size and the budget
  bullet: Ball(sqrt(D)), the radius of a LayerNorm output with unit gain and zero bias (8 at D = 64).
- ``l2-global``: ``certify.L2MultiheadAttention(64, 4)`` after ``torch.manual_seed(0)``, N = 16, global.

Which "before" numbers belong to the same layer: the demo, D = 64 and L2 layers reproduce the issue's certified
values (104, 3.79, 156.7, 17.7), so they are the layers the issue measured. The biased D = 4 layer and the digits
ViT are not: the issue does not say how its layers were made, and castin (a closed form) on the rebuilt ones is far
below the issue's numbers (29 against the issue's best 48.7 at R = 3; 303 against the issue's castin 64,187 for the
ViT). Those rows say so; compare their ratios, not their values.

"before lower" is whatever the issue reported, which for some rows was a longer search than the default budget
(noted in the row). The peak memory is the process's resident set sampled every 50 ms during the row.
Any certified upper bound below the row's best lower bound is reported as a SOUNDNESS VIOLATION (exit status 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import certify  # noqa: E402
from certify.experiments import (ToyTask, VisionResult, attention_inputs, attention_layer,  # noqa: E402
                                 train_digits_transformer, train_toy_layer)

SCRIPT = "benchmarks/issue15_table.py"


@dataclasses.dataclass(frozen=True)
class Row:
    name: str  # for --rows
    description: str  # the description of the layer
    build: Callable[[], dict[str, Any]]  # the keyword arguments of certify_layer (layer, tokens / radius / center ...)
    domain: str
    norm: str
    before_upper: str  # the numbers, as printed there
    before_lower: str
    before_ratio: tuple[float, float] | None  # (low, high): the issue gives ranges for the three N = 17 layers
    budget: float = 10.0
    caveat: str = ""  # why the "before" values may belong to another layer


# -- the layers -------------------------------------------------------------------------------------------------

@functools.cache
def demo_layer() -> torch.nn.Module:
    return train_toy_layer("dp", ToyTask(), seed=0)[0]


@functools.cache
def biased_d4_layer() -> torch.nn.MultiheadAttention:
    """The biased D = 4 layer of benchmarks/lower_bound.py's BIASED_SNIPPET (same seeds, same order)."""
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(4, 2, bias=True, batch_first=True).double()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        layer.in_proj_bias.copy_(0.5 * torch.randn(12, generator=generator, dtype=torch.float64))
        layer.out_proj.bias.copy_(0.5 * torch.randn(4, generator=generator, dtype=torch.float64))
    return layer.eval()


@functools.cache
def digits_result() -> VisionResult:
    return train_digits_transformer()  # D = 48, H = 3, 3 layers, 15 epochs, seed 0


def vit_layer(index: int) -> torch.nn.MultiheadAttention:
    return attention_layer(digits_result().model, index).eval()


def vit_center() -> torch.Tensor:
    """X0: the first 5 rows of attention layer 0's input for the first test image."""
    result = digits_result()
    return attention_inputs(result.model, result.test_images[:1], 0)[0, :5].double()


def fresh_mha(D: int, H: int) -> torch.nn.MultiheadAttention:
    torch.manual_seed(0)
    return torch.nn.MultiheadAttention(D, H, batch_first=True).eval()


def fresh_l2(D: int, H: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return certify.L2MultiheadAttention(D, H).eval()


# -- the rows: the descriptions and "before" numbers, copied from the issue text ------------------------

VIT = "trained digits ViT layer 0, D = 48, H = 3, d = 16, q/k/v/out biases"
BIASED = "`nn.MultiheadAttention` D = 4, H = 2, biases, N = 4"
# Layers the issue measured whose construction it does not give, and which the rebuilt ones evidently are not:
# castin (a closed form, unchanged since) on the rebuilt layer is far below the numbers.
NOT_BIASED = ("not the issue's layer (the issue's best certified 48.7 at R = 3 is above castin on this one): "
              "compare ratios, not values")
NOT_VIT = ("not the issue's layer (the issue's castin was 64,187 at R = 3, N = 5; this digits ViT is a later, "
           "different model): compare ratios, not values")
DP64 = "fresh `nn.MultiheadAttention` D = 64, H = 4, N = 16"


def demo() -> dict[str, Any]:
    return {"layer": demo_layer(), "tokens": 8, "radius": 3.0}


def biased(radius: float) -> Callable[[], dict[str, Any]]:
    return lambda: {"layer": biased_d4_layer(), "tokens": 4, "radius": radius}


def vit_ball(index: int, tokens: int, radius: float) -> Callable[[], dict[str, Any]]:
    return lambda: {"layer": vit_layer(index), "tokens": tokens, "radius": radius}


def vit_eps(eps: float) -> Callable[[], dict[str, Any]]:
    return lambda: {"layer": vit_layer(0), "center": vit_center(), "eps": eps, "eps_norm": "inf"}


def fresh_ball(D: int, H: int, tokens: int, radius: float) -> Callable[[], dict[str, Any]]:
    return lambda: {"layer": fresh_mha(D, H), "tokens": tokens, "radius": radius}


# The "before" strings and ratios below are hard-coded from issue 15's text (measured there on an older version of
# the code); "-" where the issue gives no number. Ratios in parentheses are the inf-norm figures.
ROWS: tuple[Row, ...] = (
    Row("demo-2", "`certify demo` DP-MHA, N = D = 8, H = 2", demo, "ball R = 3", "2", "104 (bnb)", "11.1", (9.4, 9.4)),
    Row("demo-inf", "`certify demo` DP-MHA, N = D = 8, H = 2", demo, "ball R = 3", "inf", "-", "-", (37.7, 37.7)),
    Row("d4-r1-2", BIASED, biased(1.0), "ball R = 1", "2", "8.32", "2.10", (4.0, 4.0), caveat=NOT_BIASED),
    Row("d4-r1-inf", BIASED, biased(1.0), "ball R = 1", "inf", "-", "-", (9.5, 9.5), caveat=NOT_BIASED),
    Row("d4-r3-2", BIASED, biased(3.0), "ball R = 3", "2", "48.7", "8.66 (long search; default 6.55)", (5.6, 5.6),
        caveat=NOT_BIASED),
    Row("d4-r3-inf", BIASED, biased(3.0), "ball R = 3", "inf", "-", "-", (16.3, 16.3), caveat=NOT_BIASED),
    Row("vit-n5-ball", f"{VIT}, N = 5", vit_ball(0, 5, 3.0), "ball R = 3, 20 s", "2",
        "23,904 (bnb; castin 64,187)", "3,713", (6.4, 6.4), budget=20.0, caveat=NOT_VIT),
    *(Row(f"vit-n17-layer{i}", f"same model, N = 17, attention layer {i} of three", vit_ball(i, 17, 2.75),
          "ball R = 2.75, 20 s", "2", "6,755-15,712 (range over the 3 layers)", "636-1,684", (9.3, 12.0),
          budget=20.0, caveat=NOT_VIT)
      for i in range(3)),
    Row("vit-eps0.01-2", f"{VIT}, N = 5, around a real input X0", vit_eps(0.01), "l_inf eps-ball, eps = 0.01, 20 s",
        "2", "8,522", "275 (and ||J(X0)||_2 = 239)", (31.0, 31.0), budget=20.0, caveat=NOT_VIT),
    Row("vit-eps0.01-inf", f"{VIT}, N = 5, around a real input X0", vit_eps(0.01), "l_inf eps-ball, eps = 0.01, 20 s",
        "inf", "-", "-", (17.0, 17.0), budget=20.0, caveat=NOT_VIT),
    Row("vit-eps0.1-2", f"{VIT}, N = 5, around a real input X0", vit_eps(0.1), "l_inf eps-ball, eps = 0.1, 20 s",
        "2", "26,850", "730", (37.0, 37.0), budget=20.0, caveat=NOT_VIT),
    Row("vit-eps0.1-inf", f"{VIT}, N = 5, around a real input X0", vit_eps(0.1), "l_inf eps-ball, eps = 0.1, 20 s",
        "inf", "-", "-", (117.0, 117.0), budget=20.0, caveat=NOT_VIT),
    Row("dp64-r8-2", DP64, fresh_ball(64, 4, 16, 8.0), "ball R = 8", "2", "156.7 (bnb, after 60-280 s)",
        "19.6 (300 s search)", (8.0, 8.0)),
    Row("dp64-r1-2", DP64, fresh_ball(64, 4, 16, 1.0), "ball R = 1", "2", "3.79", "1.044", (3.6, 3.6)),
    Row("dp64-r8-inf", DP64, fresh_ball(64, 4, 16, 8.0), "ball R = 8", "inf", "5,014", "13.8",
        (5014 / 13.8, 5014 / 13.8)),
    Row("l2-global", "`certify.L2MultiheadAttention` D = 64, H = 4, N = 16",
        lambda: {"layer": fresh_l2(64, 4), "tokens": 16}, "global", "2", "17.7 (factorised)",
        "1.68 (60 s search; 1.23 at 10 s)", (10.5, 10.5)),
    Row("dp64-n64", "fresh `nn.MultiheadAttention` N = 64, D = 64, H = 4", fresh_ball(64, 4, 64, 8.0),
        "ball R = 8 = sqrt(D) (picked)", "2", "only castin (bnb died allocating 8 GiB)", "-", None),
    Row("budget-256", "10 s lower-bound budget took 112 s: fresh `nn.MultiheadAttention` D = 256, H = 8, N = 128",
        fresh_ball(256, 8, 128, 16.0), "ball R = 16 = sqrt(D) (picked)", "2", "-", "- (the search took 112 s)", None),
    Row("budget-64x512", "10 s lower-bound budget took 457 s: fresh `nn.MultiheadAttention` D = 64, H = 4, N = 512",
        fresh_ball(64, 4, 512, 8.0), "ball R = 8 = sqrt(D) (picked)", "2", "-", "- (the search took 457 s)", None),
    Row("bert", "BERT-base size: fresh `nn.MultiheadAttention` D = 768, H = 12, N = 128",
        fresh_ball(768, 12, 128, math.sqrt(768)), "ball R = 27.7 = sqrt(D) (picked)", "2",
        "only castin (bnb died allocating 6 GiB)", "- (the search was killed after 8 min)", None),
)


# -- measuring one row ------------------------------------------------------------------------------------------

def resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the process's peak so far
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemory:
    """The resident set's peak inside a `with` block, sampled every 50 ms by a background thread."""

    def __enter__(self) -> "PeakMemory":
        self.peak = resident_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, resident_bytes())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, resident_bytes())


def command(row: Row, budget: float | None) -> str:
    extra = "" if budget is None else f" --budget {budget:g}"
    return f"PYTHONPATH=. python {SCRIPT} --rows {row.name}{extra}"


def measure(row: Row, budget: float | None = None) -> dict[str, Any]:
    """Build the row's layer and domain (not timed), run certify_layer, and collect the table's columns."""
    seconds_each = row.budget if budget is None else budget
    result: dict[str, Any] = {
        "name": row.name, "row": row.description, "domain": row.domain, "norm": row.norm,
        "before_upper": row.before_upper, "before_lower": row.before_lower, "before_ratio": row.before_ratio,
        "caveat": row.caveat, "time_budget": seconds_each, "command": command(row, budget), "violations": [],
    }
    try:
        arguments = row.build()
        with PeakMemory() as memory:
            start = time.perf_counter()
            report = certify.certify_layer(**arguments, norm=row.norm, time_budget=seconds_each)
            result["seconds"] = time.perf_counter() - start
    except Exception as error:  # a row that fails is reported in the table, the others still run
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()
        return result
    result["peak_gib"] = memory.peak / 2**30
    upper, lower = report.best_upper(), report.best_lower()
    result["uppers"] = {c.method: c.value for c in report.certificates if c.kind == "upper" and c.certified}
    result["method_seconds"] = {c.method: c.seconds for c in report.certificates}
    result["skipped"] = list(report.skipped)
    result["now_upper"] = None if upper is None else upper.value
    result["now_method"] = None if upper is None else upper.method
    result["now_lower"] = None if lower is None else lower.value
    result["now_ratio"] = report.ratio
    if lower is not None:
        result["lower_stopped"] = lower.details.get("stopped")
        result["violations"] = [f"{method} = {value!r} < lower {lower.value!r}"
                                for method, value in result["uppers"].items() if value < lower.value]
    if row.before_ratio is not None and math.isfinite(report.ratio):
        result["improvement"] = tuple(before / report.ratio for before in row.before_ratio)
    return result


# -- the table --------------------------------------------------------------------------------------------------

def number(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def span(values: tuple[float, float] | None) -> str:
    if values is None:
        return "-"
    low, high = values
    return number(low) if number(low) == number(high) else f"{number(low)}-{number(high)}"


def notes(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"**failed**: {result['error'][:300]}"
    parts = [result["caveat"]] if result["caveat"] else []
    if result["violations"]:
        parts.append("**SOUNDNESS VIOLATION: " + "; ".join(result["violations"]) + "**")
    others = {m: v for m, v in result["uppers"].items() if m != result["now_method"]}
    if others:
        parts.append("also " + ", ".join(f"{m} {number(v)}" for m, v in others.items()))
    parts.append("s: " + ", ".join(f"{m} {s:.1f}" for m, s in result["method_seconds"].items()))
    parts.extend(f"skipped {reason}" for reason in result["skipped"])
    parts.append(f"peak {result['peak_gib']:.2f} GiB")
    return "; ".join(parts)


HEADER = ("row", "domain", "norm", "before certified", "before lower", "before ratio", "now certified (method)",
          "now lower", "now ratio", "improvement", "s", "notes", "command")


def table_line(result: dict[str, Any]) -> str:
    failed = "error" in result
    now = "-" if failed or result["now_upper"] is None else f"{number(result['now_upper'])} ({result['now_method']})"
    cells = (result["row"], result["domain"], result["norm"], result["before_upper"], result["before_lower"],
             span(result["before_ratio"]), now, "-" if failed else number(result["now_lower"]),
             "-" if failed else number(result["now_ratio"]), span(result.get("improvement")) + ("x" if
             result.get("improvement") else ""), "-" if failed else f"{result['seconds']:.1f}", notes(result),
             f"`{result['command']}`")
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", help=f"comma-separated row names (default: all): {', '.join(r.name for r in ROWS)}")
    parser.add_argument("--budget", type=float, help="override every row's time_budget (seconds; for quick checks)")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--quiet", action="store_true", help="print only the table")
    args = parser.parse_args(argv)
    names = [r.name for r in ROWS] if args.rows is None else args.rows.split(",")
    unknown = sorted(set(names) - {r.name for r in ROWS})
    if unknown:
        parser.error(f"unknown row(s) {unknown}; known: {', '.join(r.name for r in ROWS)}")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    results, start = [], time.perf_counter()
    for row in (r for r in ROWS if r.name in names):
        result = measure(row, args.budget)
        results.append(result)
        if not args.quiet:
            print(f"  {row.name}: {table_line(result)}", flush=True)
            if "traceback" in result:
                print(result["traceback"], file=sys.stderr, flush=True)
    total = time.perf_counter() - start
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for result in results:
        print(table_line(result))
    print(f"\n{len(results)} rows in {total:.0f} s")
    violations = [v for r in results for v in r["violations"]]
    for violation in violations:
        print(f"SOUNDNESS VIOLATION: {violation}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"total_seconds": total, "rows": results}, handle, indent=1, default=str)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
