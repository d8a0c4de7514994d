"""Whole-model certified local Lipschitz constants on the digits vision transformer, end to end through ONNX.

Trains `certify.experiments.DigitsTransformer` (scikit-learn digits, seconds on a CPU), exports it with
torch.onnx (opset 17), imports the graph with `certify.model.from_onnx`, checks it against onnxruntime, and for each
eps and norm prints: certified (`certify_model`, method "jacobian": the model's Jacobian as one product plus a
certified error), the baseline "product" (the product of per-block local constants on propagated boxes, residuals
by their direct Jacobian or 1 + Lip), attained (`attained_lipschitz`, an estimate), certified / attained, seconds of
each; with --radii K also the certified robustness radius (`certified_radius`) of the first K test images.

    PYTHONPATH=. python benchmarks/model_certify.py [--eps 1e-6 1e-5 1e-4 1e-3] [--radii 3] [--nested K] [--json FILE]

With --dask (a LocalCluster of --workers processes) or --scheduler ADDRESS each (norm, eps) row is one work unit of
``certify.distributed.run_sweep``; --checkpoint FILE keeps the finished rows (atomically, after each), and
--resume FILE runs only the missing ones (the trained model must be the same: a SHA-256 of its weights is checked).
Errors (an unreachable scheduler, a damaged or foreign checkpoint) print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
import warnings

from pathlib import Path

# one BLAS thread, as in Dask's workers: the rows of a --dask run then equal the in-process rows to the last bit
# (with OpenBLAS on two threads they differed in the last digit)
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
# benchmarks/distributed.py shares its name with the `distributed` package: run as a script, this folder is first on
# the path and `import distributed` (for --dask) would find that file; take the folder off the path
HERE = Path(__file__).resolve().parent
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from certify.experiments import train_digits_transformer  # noqa: E402
from certify.model import attained_lipschitz, certified_radius, certify_model, forward, from_onnx  # noqa: E402


def model_row(model, x0: torch.Tensor, unit: tuple[str, float], nested: int = 0) -> dict:
    """One (norm, eps) row: certified (jacobian, its boxes narrowed by ``nested`` smaller balls), the product
    baseline and the attained value, with their seconds (the work unit of --dask; a pure function of the model, the
    input and the unit but for the seconds)."""
    norm, eps = unit
    torch.set_num_threads(1)  # as in the main process: the same reduction order, the same numbers to the last bit
    cert = certify_model(model, x0, eps, norm, nested=nested)
    base = certify_model(model, x0, eps, norm, method="product")
    attained = attained_lipschitz(model, x0, eps, norm, restarts=4, steps=10)
    return {"norm": norm, "eps": eps, "certified": cert.value, "baseline": base.value, "attained": attained.value,
            "ratio": cert.value / attained.value, "baseline_ratio": base.value / attained.value,
            "certify_seconds": cert.seconds, "baseline_seconds": base.seconds, "attained_seconds": attained.seconds,
            "prefixes": cert.to_json()["prefixes"]}


def certify_rows(model, x0: torch.Tensor, units: list[tuple[str, float]], args: argparse.Namespace,
                 model_sha256: str) -> list[dict]:
    """The rows of ``units``, in order: in this process, or on Dask with --dask / --scheduler; checkpointed with
    --checkpoint, continued with --resume (``certify.distributed.run_sweep``)."""
    from functools import partial

    from certify.distributed import dask_client, run_sweep

    job = {"sweep": "model_certify", "epochs": args.epochs, "input": args.input, "model_sha256": model_sha256,
           "nested": args.nested}
    with contextlib.ExitStack() as stack:
        client = None
        if args.dask or args.scheduler is not None:
            client = stack.enter_context(dask_client(args.workers, args.scheduler, timeout=args.scheduler_timeout))
        sweep = run_sweep(units, partial(model_row, model, x0, nested=args.nested), client,
                          key=lambda u: f"{u[0]}/{u[1]!r}", job=job,
                          encode=dict, decode=dict,
                          checkpoint=args.checkpoint if args.checkpoint is not None else args.resume,
                          resume=args.resume is not None)
    if sweep.stats.resumed:
        print(f"({sweep.stats.resumed} rows from {args.resume}, {sweep.stats.computed} computed)")
    return sweep.results


def main() -> int:
    """Run the benchmark; a CertifyError (bad checkpoint, unreachable scheduler) -> one line, exit status 2."""
    from certify import CertifyError

    try:
        run()
    except CertifyError as error:
        print(f"model_certify.py: error: {error}", file=sys.stderr)
        return 2
    return 0


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, nargs="+", default=[1e-6, 1e-5, 1e-4, 1e-3])
    parser.add_argument("--radii", type=int, default=0, help="certified radii of the first K test images")
    parser.add_argument("--nested", type=int, default=0, metavar="K",
                        help="narrow the chain's boxes by K balls of radii eps 2^(-k/K), k = K .. 1 "
                             "(certify_model's nested)")
    parser.add_argument("--norms", nargs="+", default=["inf", "2"])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--input", type=int, default=0, help="index of the test image")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--dask", action="store_true", help="rows as work units on a LocalCluster of --workers")
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster processes (default 2)")
    parser.add_argument("--scheduler", metavar="ADDRESS", help="rows on an existing Dask cluster")
    parser.add_argument("--scheduler-timeout", type=float, default=20.0, metavar="SECONDS")
    parser.add_argument("--checkpoint", metavar="FILE", help="finished rows to FILE after each row")
    parser.add_argument("--resume", metavar="FILE", help="keep the rows finished in FILE, run the others")
    args = parser.parse_args()
    torch.set_num_threads(1)
    t = time.perf_counter()
    result = train_digits_transformer(epochs=args.epochs)
    print(f"trained DigitsTransformer (D = 48, H = 3, 3 layers): test accuracy {result.test_accuracy:.3f}, "
          f"{time.perf_counter() - t:.1f} s")
    x0 = result.test_images[args.input:args.input + 1]
    digest = hashlib.sha256()  # the trained weights: a resumed run must certify the same model
    for name, tensor in sorted(result.model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().numpy().tobytes())
    model_sha256 = digest.hexdigest()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = os.path.join(tmp, "vit.onnx")
        torch.onnx.export(result.model, (x0,), path, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"])
        model, _ = from_onnx(path)
        import onnxruntime

        reference = onnxruntime.InferenceSession(path).run(None, {"x": x0.numpy()})[0]
    error = float(np.abs(forward(model, x0[0], torch.float32).numpy().reshape(reference.shape) - reference).max())
    print(f"ONNX import: {len(model.blocks)} blocks, max |ours - onnxruntime| = {error:.2e}")
    header = (f"{'norm':>4} {'eps':>7} {'jacobian':>11} {'s':>6} {'product':>11} {'s':>6} {'attained':>9} "
              f"{'ratio':>9} {'product ratio':>13}")
    units = [(norm, eps) for norm in args.norms for eps in args.eps]
    rows = certify_rows(model, x0[0], units, args, model_sha256)
    print(header)
    for row in rows:
        print(f"{row['norm']:>4} {row['eps']:7.0e} {row['certified']:11.4g} {row['certify_seconds']:6.1f} "
              f"{row['baseline']:11.4g} {row['baseline_seconds']:6.1f} {row['attained']:9.4g} {row['ratio']:9.3g} "
              f"{row['baseline_ratio']:13.3g}", flush=True)
    radii = []
    if args.radii:
        print(f"{'image':>5} {'norm':>4} {'label':>5} {'radius':>10} {'calls':>5} {'seconds':>7}")
    for i in range(args.radii):
        for norm in args.norms:
            r = certified_radius(model, result.test_images[i], norm)
            radii.append({"image": i, **r.to_json()})
            print(f"{i:5d} {norm:>4} {r.label:5d} {r.value:10.3g} {r.calls:5d} {r.seconds:7.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"test_accuracy": result.test_accuracy, "onnx_error": error, "rows": rows, "radii": radii},
                      handle, indent=1)


if __name__ == "__main__":
    raise SystemExit(main())
