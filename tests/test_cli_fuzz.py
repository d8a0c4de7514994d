"""A seeded fuzz of `certify layer` over malformed checkpoints and arguments (issue 16, "Guard it for good").

Each case writes one checkpoint (a torch.nn.MultiheadAttention state dict or a certify-format layer, mutated: keys
dropped or added, shapes changed, dtypes changed, NaN / Inf entries, non-tensors, config values changed; or a file
that is truncated, garbage, empty, missing, a directory, or a torch file of the wrong type) and draws arguments
(tokens, heads, add-zero-attn, norm, radius, method, lower bound or not, JSON path). It runs the CLI in-process and
checks the contract:

- no exception escapes `certify.cli.main` (argparse's SystemExit is the only exit);
- exit 0 only with a verdict: a table with at least one certified upper bound on stdout and, with --json, a JSON
  file whose results hold it;
- otherwise exit 2 with a ``certify layer: error: ...`` line on stderr, and no table.

Values outside this fuzz: weight scales beyond 1e+-6 and radii beyond 1e6 (floating-point underflow and overflow
of the closed forms, issue 16 items 1 and 2, are fuzzed by their own tests). Every case is cheap: --time-budget 0.1,
at most 4 tokens or at least 10^7 (which must be refused by the memory estimate or certified matrix-free), and the
global branch and bound (a fixed start-up of seconds) is never asked for. CERTIFY_FUZZ_CASES sets the count.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import traceback

import numpy as np
import torch

from certify import ContractiveL2MultiheadAttention, DotProductMultiheadAttention, L2MultiheadAttention, save_layer
from certify.attention import UntiedL2MultiheadAttention
from certify.cli import main

CASES = int(os.environ.get("CERTIFY_FUZZ_CASES", "400"))
DTYPES = (torch.float32, torch.float64, torch.float16, torch.int64, torch.bool, torch.complex64)
NON_TENSORS = ("text", [1.0, 2.0], 3.5, None, {"a": 1}, 7)


def _tensor(rng: np.random.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    scale = float(rng.choice([1.0, 1e-3, 1e3]))
    values = torch.from_numpy(rng.standard_normal(shape) * scale)
    if values.numel() and rng.random() < 0.1:
        values.view(-1)[int(rng.integers(values.numel()))] = float(rng.choice([math.nan, math.inf, -math.inf]))
    return values.to(dtype) if dtype != torch.bool else values > 0


def _cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (tensor.real if tensor.is_complex() and not dtype.is_complex else tensor).to(dtype)


def _mutate_shape(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[int, ...]:
    choice = int(rng.integers(4))
    if choice == 0 and shape:
        k = int(rng.integers(len(shape)))
        return shape[:k] + (max(0, shape[k] + int(rng.choice([-1, 1, 2]))),) + shape[k + 1:]
    if choice == 1:
        return shape + (1,)
    if choice == 2 and len(shape) > 1:
        return shape[1:]
    return tuple(reversed(shape))


def _mutate_state(rng: np.random.Generator, state: dict, dtype: torch.dtype) -> dict:
    """Apply 0-3 random mutations to a state dict (dict of tensors)."""
    state = dict(state)
    for _ in range(int(rng.integers(4))):
        keys = sorted(state)
        kind = int(rng.integers(7))
        if kind == 0 and keys:
            state.pop(keys[int(rng.integers(len(keys)))])
        elif kind == 1:
            name = str(rng.choice(["bias_k", "bias_v", "extra.weight", "q_proj_weight", "W_K", "b_Q"]))
            state[name] = _tensor(rng, (1, 1, int(rng.integers(1, 5))), dtype)
        elif kind == 2 and keys:
            key = keys[int(rng.integers(len(keys)))]
            if isinstance(state[key], torch.Tensor):
                state[key] = _tensor(rng, _mutate_shape(rng, tuple(state[key].shape)), dtype)
        elif kind == 3 and keys:
            key = keys[int(rng.integers(len(keys)))]
            if isinstance(state[key], torch.Tensor):
                state[key] = _cast(state[key], DTYPES[int(rng.integers(len(DTYPES)))])
        elif kind == 4 and keys:
            state[keys[int(rng.integers(len(keys)))]] = NON_TENSORS[int(rng.integers(len(NON_TENSORS)))]
        elif kind == 5 and keys:
            key = keys[int(rng.integers(len(keys)))]
            if isinstance(state[key], torch.Tensor) and state[key].is_floating_point() and state[key].numel():
                state[key] = state[key].clone()
                state[key].view(-1)[0] = float(rng.choice([math.nan, math.inf]))
        elif kind == 6:
            state = {k: (_cast(v, DTYPES[int(rng.integers(len(DTYPES)))]) if isinstance(v, torch.Tensor) else v)
                     for k, v in state.items()}
    return state


def _mha_checkpoint(rng: np.random.Generator, clean: bool) -> tuple[object, int]:
    D = int(rng.choice([2, 4, 6]))
    H = int(rng.choice([h for h in (1, 2, 3) if D % h == 0]))
    options = dict(bias=bool(rng.random() < 0.8), add_bias_kv=not clean and bool(rng.random() < 0.1),
                   add_zero_attn=not clean and bool(rng.random() < 0.2))
    if not clean and rng.random() < 0.1:
        options.update(kdim=D + 1, vdim=D)
    dtype = torch.float64 if rng.random() < 0.5 else torch.float32
    mha = torch.nn.MultiheadAttention(D, H, batch_first=True, dtype=dtype, **options)
    state = dict(mha.state_dict())
    return (_mutate_state(rng, state, dtype) if not clean and rng.random() < 0.7 else state), H


def _certify_checkpoint(rng: np.random.Generator, path: str, clean: bool) -> tuple[object, int]:
    D = int(rng.choice([2, 4]))
    H = int(rng.choice([1, 2]))
    dtype = torch.float64 if rng.random() < 0.5 else torch.float32
    make = [lambda: L2MultiheadAttention(D, H, bias=bool(rng.random() < 0.5), dtype=dtype),
            lambda: DotProductMultiheadAttention(D, H, bias=bool(rng.random() < 0.5), dtype=dtype),
            lambda: UntiedL2MultiheadAttention(D, H, dtype=dtype),
            lambda: ContractiveL2MultiheadAttention(D, H, max_tokens=8, dtype=dtype)][int(rng.integers(4))]
    save_layer(make(), path)
    payload = torch.load(path, weights_only=True)
    if clean or rng.random() < 0.3:
        return payload, H
    for _ in range(int(rng.integers(1, 3))):
        kind = int(rng.integers(6))
        if kind == 0:
            key = str(rng.choice(["D", "H", "gamma", "max_tokens", "dtype", "bias", "norm", "extra"]))
            value = [0, -1, 5, 3, 1.5, "4", None, True, "bogus", "Tensor", "complex64", 1e300, 0.5][int(rng.integers(13))]
            if isinstance(payload.get("config"), dict):
                payload["config"][key] = value
        elif kind == 1:
            payload.pop(str(rng.choice(["config", "state_dict", "class", "version"])), None)
        elif kind == 2:
            payload["class"] = str(rng.choice(["Linear", "L2MultiheadAttention", "DotProductMultiheadAttention"]))
        elif kind == 3 and isinstance(payload.get("state_dict"), dict):
            payload["state_dict"] = _mutate_state(rng, payload["state_dict"], dtype)
        elif kind == 4:
            payload["config"] = NON_TENSORS[int(rng.integers(len(NON_TENSORS)))]
        else:
            payload["version"] = int(rng.choice([0, 2]))
    return payload, H


def _write_checkpoint(rng: np.random.Generator, folder: str, clean: bool) -> tuple[str, int]:
    path = os.path.join(folder, "layer.pt")
    if os.path.exists(path):
        os.remove(path)
    kind = rng.random()
    if kind < 0.45:
        payload, H = _mha_checkpoint(rng, clean)
    elif clean or kind < 0.85:
        payload, H = _certify_checkpoint(rng, path, clean)
    else:
        H = 2
        save_layer(L2MultiheadAttention(4, 2), path)
        blob = open(path, "rb").read()
        special = int(rng.integers(7))
        if special == 0:
            open(path, "wb").write(blob[: int(rng.integers(len(blob)))])  # truncated
        elif special == 1:
            open(path, "wb").write(rng.bytes(int(rng.integers(1, 2000))))  # garbage
        elif special == 2:
            open(path, "wb").write(b"")
        elif special == 3:
            os.remove(path)  # missing
        elif special == 4:
            return folder, H  # a directory
        else:
            torch.save([torch.zeros(2), 1][special - 5], path)  # a torch file that is not a dict
        return path, H
    torch.save(payload, path)
    return path, H


def _arguments(rng: np.random.Generator, checkpoint: str, heads: int, folder: str,
               clean: bool) -> tuple[list[str], str | None]:
    """Random arguments; ``clean``: only valid values (the method may still not apply to the layer)."""
    argv = ["layer", checkpoint, "--quiet", "--time-budget", "0.1"]
    valid_tokens = ["1", "2", "3", "4", "10000000"]
    tokens = rng.choice(valid_tokens if clean else valid_tokens + ["0", "-2", "x", "1.5", "1000000000000"])
    if clean or rng.random() < 0.95:
        argv += ["--tokens", str(tokens)]
    if clean or rng.random() < 0.95:
        argv += ["--norm", str(rng.choice(["2", "inf"] if clean else ["2", "inf", "inf", "1", "fro"]))]
    valid_radii = [None, "1", "0.5", "3", "1e-6", "1e6"]
    radius = rng.choice(valid_radii if clean else valid_radii + ["0", "-1", "nan", "inf", "abc"])
    if radius is not None:
        argv += ["--radius", str(radius)]
    h = heads if clean else rng.choice([None, heads, heads, 0, heads + 1, "two"])
    if h is not None:
        argv += ["--heads", str(h)]
    zero = "no" if clean else rng.choice([None, "no", "no", "yes", "maybe"])
    if zero is not None:
        argv += ["--add-zero-attn", str(zero)]
    method = str(rng.choice(["paper", "factorised", "castin", "bnb", "none"] + ([] if clean else ["bogus"])))
    if method != "none" or radius is None:  # the default set includes the global bnb (seconds): name a method
        argv += ["--method", "paper" if method == "none" else method]
        if method == "bnb" and radius is None:
            argv += ["--radius", "1"]  # the local branch and bound only
    if rng.random() < 0.85:
        argv.append("--no-lower")
    json_path = None
    where = rng.random()
    if where < 0.2:
        json_path = os.path.join(folder, "out.json")
    elif where < 0.3 and not clean:
        json_path = os.path.join(folder, "missing", "out.json")
    elif where < 0.35 and not clean:
        json_path = folder
    if json_path is not None:
        argv += ["--json", json_path]
        if os.path.isfile(os.path.join(folder, "out.json")):
            os.remove(os.path.join(folder, "out.json"))
    return argv, json_path


def _run(argv: list[str]) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_info:
            code = exit_info.code
        except BaseException:  # noqa: BLE001  (the contract under test: nothing escapes)
            code = "uncaught:\n" + traceback.format_exc()
    return code, out.getvalue(), err.getvalue()


def _violation(code: object, out: str, err: str, json_path: str | None) -> str | None:
    if "Traceback" in out + err:
        return "traceback printed"
    if code == 0:
        rows = [line.split() for line in out.splitlines()]
        if not any(len(r) >= 5 and r[1] == "upper" and "yes" in r for r in rows):
            return "exit 0 without a certified upper bound in the table"
        if json_path is not None:
            if not os.path.isfile(json_path):
                return "exit 0 but the JSON file was not written"
            results = json.load(open(json_path)).get("results", [])
            if not any(r["kind"] == "upper" and r["certified"] for r in results):
                return "exit 0 but the JSON holds no certified upper bound"
        return None
    if code == 2:
        if not any(line.startswith("certify layer: error: ") for line in err.splitlines()):
            return "exit 2 without a 'certify layer: error:' line"
        if "best certified" in out or " upper " in out:
            return "exit 2 but numbers were printed"
        return None
    return f"exit status {code!r}"


def test_cli_fuzz_never_tracebacks_and_never_exits_0_without_a_verdict(tmp_path):
    rng = np.random.default_rng(20261204)
    torch.manual_seed(0)
    counts = {0: 0, 2: 0}
    failures = []
    for case in range(CASES):
        clean = rng.random() < 0.3  # a valid checkpoint and valid arguments, so that exit 0 is reached too
        checkpoint, heads = _write_checkpoint(rng, str(tmp_path), clean)
        argv, json_path = _arguments(rng, checkpoint, heads, str(tmp_path), clean)
        code, out, err = _run(argv)
        problem = _violation(code, out, err, json_path)
        if problem is not None:
            failures.append(f"case {case}: {problem}\n  argv: {argv}\n  code: {code}\n  stderr: {err[-600:]}")
        elif code in counts:
            counts[code] += 1
    print(f"CLI fuzz: {CASES} cases, {counts[0]} certified (exit 0), {counts[2]} refused (exit 2), "
          f"{len(failures)} violations")
    assert not failures, "\n".join(failures[:5])
    assert counts[0] >= CASES // 20 and counts[2] >= CASES // 2  # the fuzz reaches both outcomes
    assert not os.path.exists(tmp_path / "missing")  # --json never created a directory
