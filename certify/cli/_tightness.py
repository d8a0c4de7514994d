"""`certify tightness`: the paper's asymptotic-tightness experiment (Sec. 5.1), reproduced and extended."""

from __future__ import annotations

import argparse
import os
import sys

from ..adversarial import CONFIGS, TightnessRow, plot_tightness, tightness
from ..adversarial._tightness import check_against_uppers
from ..bounds import METHODS
from ..report import format_rows
from ._common import add_output_flags, positive_float, positive_int, write_output


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tightness", help="lower vs certified upper bounds as N grows (paper Sec. 5.1)",
                                   description=run.__doc__)
    parser.add_argument("--config", choices=CONFIGS + ("all",), default="unit",
                        help="unit: D = H = 1 (the paper's); multihead: D = 8, H = 2; dp: DP-MHA on balls of "
                             "growing radius; all: the three (default unit)")
    parser.add_argument("--norm", choices=("2", "inf", "both"), default="both")
    parser.add_argument("--max-tokens", type=positive_int, default=1024, help="largest N (powers of two from 2)")
    parser.add_argument("--seconds", type=positive_float, default=20.0, help="search time per (N, norm)")
    parser.add_argument("--baseline", action="store_true", help="also run the naive search with the same time")
    parser.add_argument("--method", action="append", choices=sorted(METHODS),
                        help="certified method(s) to compare with (repeatable; default: paper and factorised for L2, "
                             "castin for dp)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", help="torch device for the search (default: cuda when available)")
    parser.add_argument("--out", default=os.path.join("out", "tightness"), help="directory for the figures")
    add_output_flags(parser)
    parser.set_defaults(run=run)


HEADER = ("config", "N", "R", "norm", "lower", "bound", "upper", "lower/upper", "naive", "seconds", "found in")


def table_rows(rows: list[TightnessRow]) -> list[tuple]:
    out = []
    for r in rows:
        for k, (name, upper) in enumerate(sorted(r.uppers.items())):
            first = k == 0
            out.append((r.config if first else "", r.N if first else "", "-" if r.radius is None else r.radius,
                        r.norm, r.lower if first else "", name, upper, f"{r.ratio(name):.4f}",
                        "-" if r.naive is None else (r.naive if first else ""), f"{r.seconds:.1f}" if first else "",
                        r.found_in if first else ""))
    return out


def run(args: argparse.Namespace) -> int:
    """Best adversarial lower bound beside the certified upper bounds (paper, factorised, Castin), for each N.

    Prints a table, writes out/tightness/tightness_<config>.png and .svg (log-N axis, with a log N - log log N
    reference curve) and, with --json, every number and witness.
    """
    configs = CONFIGS if args.config == "all" else (args.config,)
    norms = ("inf", "2") if args.norm == "both" else (args.norm,)
    results = {}
    for config in configs:
        progress = (lambda row: print(f"  {config} N={row.N} R={row.radius} {row.norm}-norm: lower {row.lower:.6g} "
                                      f"({row.seconds:.1f} s)", file=sys.stderr)) if not args.quiet else None
        rows = tightness(config, norms, args.max_tokens, args.seconds, baseline=args.baseline and config != "dp",
                         seed=args.seed, device=args.device, progress=not args.quiet, on_row=progress,
                         methods=None if args.method is None else tuple(args.method))
        check_against_uppers(rows)
        print(f"tightness, config {config}")
        print(format_rows(HEADER, table_rows(rows)))
        paths = plot_tightness(rows, os.path.join(args.out, f"tightness_{config}"))
        print("figure: " + ", ".join(paths))
        print()
        results[config] = [r.to_json() for r in rows]
    write_output(args, {"seconds_per_point": args.seconds, "configs": results})
    return 0
