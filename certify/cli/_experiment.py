"""`certify experiment lm|stability`: the character-level PTB language model and the depth-stability experiment
(MATH.md section 6). Both train on CPU for a wall-clock budget; see certify/experiments/README.md."""

from __future__ import annotations

import argparse
import math

import torch

from ..experiments import ATTENTIONS, LMConfig, lm_experiment, load_ptb, stability_experiment, tiny_corpus
from ..report import format_rows
from ._common import add_output_flags, positive_float, positive_int, write_output


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", metavar="DIR", help="directory with ptb.valid.txt and ptb.test.txt "
                        "(default: ../shared/data/ptb next to the repository)")
    parser.add_argument("--tiny", action="store_true", help="use the built-in toy corpus (code-path tests only)")
    parser.add_argument("--d-model", type=positive_int, default=64, help="embedding dimension D (default 64)")
    parser.add_argument("--heads", type=positive_int, default=4, help="attention heads H (default 4)")
    parser.add_argument("--context", type=positive_int, default=64, help="characters per window N (default 64)")
    parser.add_argument("--ff", type=positive_int, default=256, help="feed-forward width (default 256)")
    parser.add_argument("--layer-norm", choices=("pre", "post"), default="pre", help="LayerNorm placement")
    parser.add_argument("--gamma", type=positive_float, default=0.9, help="contractive-l2: Lip bound gamma < 1")
    parser.add_argument("--lr", type=positive_float, default=1e-3, help="fixed Adam learning rate (no warm-up)")
    parser.add_argument("--batch", type=positive_int, default=32)
    parser.add_argument("--max-steps", type=positive_int, help="stop after this many steps (also bounded by --minutes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default 1)")
    add_output_flags(parser)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("experiment", help="train the PTB language model / the depth-stability runs",
                                   description=__doc__)
    experiments = parser.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    lm = experiments.add_parser("lm", help="train a character-level Transformer LM, report test bits per "
                                "character, certify every attention layer", description=run_lm.__doc__)
    lm.add_argument("--attention", nargs="+", choices=ATTENTIONS, required=True,
                    help="attention variant(s); several run one after another")
    lm.add_argument("--layers", type=positive_int, default=2)
    lm.add_argument("--minutes", type=positive_float, required=True, help="training wall time per variant")
    lm.add_argument("--test-chars", type=positive_int, help="evaluate on the first this many test characters")
    lm.add_argument("--lower-steps", type=int, default=0, help="adversarial lower-bound steps per layer (default 0: "
                    "only the lower bound attained on test-text inputs)")
    _add_model_flags(lm)
    lm.set_defaults(run=run_lm)
    stability = experiments.add_parser("stability", help="fixed learning rate, no warm-up: train each depth and "
                                       "attention, record loss curves and divergence",
                                       description=run_stability.__doc__)
    stability.add_argument("--depths", nargs="+", type=positive_int, default=[2, 6, 12])
    stability.add_argument("--attention", nargs="+", choices=ATTENTIONS, default=["dp", "l2-tied", "contractive-l2"])
    stability.add_argument("--minutes", type=positive_float, required=True, help="training wall time per run")
    _add_model_flags(stability)
    stability.set_defaults(run=run_stability)


def _corpus(args: argparse.Namespace):
    return tiny_corpus() if args.tiny else load_ptb(args.data)


def _config_options(args: argparse.Namespace) -> dict:
    return {"D": args.d_model, "H": args.heads, "context": args.context, "ff": args.ff,
            "layer_norm": args.layer_norm, "gamma": args.gamma}


def _train_options(args: argparse.Namespace) -> dict:
    return {"learning_rate": args.lr, "batch": args.batch, "max_steps": args.max_steps, "seed": args.seed}


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run_lm(args: argparse.Namespace) -> int:
    """Train a character-level Transformer on PTB for --minutes per attention variant (fixed Adam learning rate),
    report bits per character on ptb.test.txt, then certify every attention layer with `certify_layer`
    (tied / contractive L2 globally; dot-product and untied L2 on the ball that the model's LayerNorm implies).
    """
    torch.set_num_threads(args.threads)
    corpus = _corpus(args)
    if not args.quiet:
        print(f"corpus: {corpus.description}; vocabulary {corpus.vocab_size}, train {len(corpus.train)} chars")
    runs = []
    for attention in args.attention:
        config = LMConfig(corpus.vocab_size, attention, args.layers, **_config_options(args))
        callback = None if args.quiet else (lambda p, a=attention: print(
            f"  [{a}] step {p['step']:>6}  {p['seconds']:7.1f} s  train {p['train_bpc']:.3f} bpc"
            + (f"  valid {p['valid_bpc']:.3f}" if "valid_bpc" in p else ""), flush=True))
        run = lm_experiment(corpus, config, args.minutes, test_chars=args.test_chars, lower_steps=args.lower_steps,
                            callback=callback, **_train_options(args))
        runs.append(run)
        write_output(args, {"experiment": "lm", "corpus": corpus.description, "runs": runs, "complete": False})
        if "certificates" in run:
            print(f"{attention}: certificates of each attention layer on N = {args.context} tokens "
                  "(attention map without the causal mask)")
            print(format_rows(("layer", "norm", "domain", "certified upper", "method", "attained lower"),
                              [(c["layer"], c["norm"], c["domain"], _fmt(c["upper"]), c["upper_method"] or
                                c.get("error", "-")[:60], _fmt(c["lower"])) for c in run["certificates"]]))
    print(format_rows(("attention", "layers", "parameters", "minutes", "steps", "train bpc", "test bpc", "diverged"),
                      [(r["attention"], r["layers"], r["parameters"], _fmt(r["minutes"]), r["steps"],
                        _fmt(r["train_bpc"]), _fmt(r["test_bpc"]), "yes" if r["diverged"] else "no") for r in runs]))
    write_output(args, {"experiment": "lm", "corpus": corpus.description, "runs": runs, "complete": True})
    return 0


def run_stability(args: argparse.Namespace) -> int:
    """Train every depth x attention pair for --minutes each at one fixed Adam learning rate with no warm-up,
    recording loss curves, divergence (a non-finite loss) and whether validation bits per character fall below
    the unigram entropy of the training text (the model learned more than character frequencies).
    """
    torch.set_num_threads(args.threads)
    corpus = _corpus(args)
    done: list[dict] = []

    def callback(r: dict) -> None:
        done.append(r)
        write_output(args, {"experiment": "stability", "corpus": corpus.description, "learning_rate": args.lr,
                            "minutes_per_run": args.minutes, "runs": done, "complete": False})
        if not args.quiet:
            print(f"  depth {r['layers']:>2}  {r['attention']:<15} steps {r['steps']:>6}  train "
                  f"{_fmt(r['train_bpc'])}  valid {_fmt(r['valid_bpc'])}  diverged {'yes' if r['diverged'] else 'no'}",
                  flush=True)

    rows = stability_experiment(corpus, tuple(args.depths), tuple(args.attention), args.minutes, callback=callback,
                                **_config_options(args), **_train_options(args))
    unigram, bigram = corpus.unigram_bits(), corpus.bigram_bits()
    print(f"fixed Adam lr {args.lr:g}, no warm-up, {args.minutes:g} min a run; unigram entropy {unigram:.3f} bits, "
          f"bigram baseline {bigram:.3f} bits (valid)")
    print(format_rows(("layers", "attention", "parameters", "steps", "train bpc", "valid bpc", "diverged",
                       "< unigram", "< bigram"),
                      [(r["layers"], r["attention"], r["parameters"], r["steps"], _fmt(r["train_bpc"]),
                        _fmt(r["valid_bpc"]), "yes" if r["diverged"] else "no", "yes" if r["learned"] else "no",
                        "yes" if r["beats_bigram"] else "no") for r in rows]))
    write_output(args, {"experiment": "stability", "corpus": corpus.description, "learning_rate": args.lr,
                        "minutes_per_run": args.minutes, "unigram_bits": unigram, "bigram_bits": bigram,
                        "runs": rows, "complete": True})
    return 0
