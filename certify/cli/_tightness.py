"""`certify tightness`: the paper's asymptotic-tightness experiment (Sec. 5.1), reproduced and extended."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from ..adversarial import CONFIGS, TightnessRow, plot_tightness, tightness_points
from ..adversarial._tightness import check_against_uppers, shown_methods
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
    cluster = parser.add_argument_group("Dask engine (certify.distributed; each (N, norm) row is one work unit)")
    cluster.add_argument("--dask", action="store_true",
                         help="run the rows on a Dask LocalCluster of --workers processes (one thread each)")
    cluster.add_argument("--workers", type=positive_int, default=2, help="LocalCluster processes (default 2)")
    cluster.add_argument("--scheduler", metavar="ADDRESS",
                         help="run the rows on an existing Dask cluster (e.g. tcp://host:8786); implies --dask")
    cluster.add_argument("--scheduler-timeout", type=positive_float, default=20.0, metavar="SECONDS",
                         help="seconds to wait for --scheduler to answer (default 20)")
    cluster.add_argument("--checkpoint", metavar="FILE",
                         help="write the finished rows to FILE (atomically) after each row; with or without --dask")
    cluster.add_argument("--resume", metavar="FILE",
                         help="keep the rows finished in FILE (same options needed) and run the others; "
                              "checkpoints go on to FILE, or to --checkpoint")
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
    reference curve) and, with --json, every number and witness. With --dask or --scheduler each (N, norm) row is one
    work unit of the Dask engine; --checkpoint / --resume keep the finished rows across a stop (the same options
    must be given again on resume).
    """
    from ..distributed import dask_client, dask_tightness

    configs = CONFIGS if args.config == "all" else (args.config,)
    norms = ("inf", "2") if args.norm == "both" else (args.norm,)
    methods = None if args.method is None else tuple(args.method)
    for config in configs:
        shown_methods(config, methods)  # unknown methods refused before any work
    points = [p for config in configs for p in tightness_points(config, norms, args.max_tokens)]

    def progress(row: TightnessRow) -> None:
        if not args.quiet:
            print(f"  {row.config} N={row.N} R={row.radius} {row.norm}-norm: lower {row.lower:.6g} "
                  f"({row.seconds:.1f} s)", file=sys.stderr)

    with contextlib.ExitStack() as stack:
        client = None
        if args.dask or args.scheduler is not None:
            client = stack.enter_context(dask_client(args.workers, args.scheduler, timeout=args.scheduler_timeout))
        # the naive baseline searches the whole space: dask_tightness runs it for the L2 configs' rows only
        rows = dask_tightness(points, client, seconds=args.seconds, baseline=args.baseline, seed=args.seed,
                              device=args.device, methods=methods, progress=not args.quiet and client is None,
                              checkpoint=args.checkpoint if args.checkpoint is not None else args.resume,
                              resume=args.resume is not None, on_row=progress).results
    results = {}
    for config in configs:
        config_rows = [r for r in rows if r.config == config]
        check_against_uppers(config_rows)
        print(f"tightness, config {config}")
        print(format_rows(HEADER, table_rows(config_rows)))
        paths = plot_tightness(config_rows, os.path.join(args.out, f"tightness_{config}"))
        print("figure: " + ", ".join(paths))
        print()
        results[config] = [r.to_json() for r in config_rows]
    write_output(args, {"seconds_per_point": args.seconds, "configs": results})
    return 0
