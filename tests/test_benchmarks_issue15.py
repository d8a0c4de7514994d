"""Smoke test of benchmarks/issue15_table.py (issue 15's table re-measured): one tiny row, a short budget."""

import importlib.util
import json
import pathlib
import sys

import torch

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_one_row_prints_before_and_now_with_its_command(tmp_path, capsys):
    script = load("issue15_table")
    out = tmp_path / "rows.json"
    assert script.main(["--rows", "d4-r1-2", "--budget", "0.5", "--json", str(out), "--quiet"]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert "error" not in row and row["violations"] == []
    assert row["before_upper"] == "8.32" and row["now_lower"] <= row["now_upper"]
    assert row["command"] == "PYTHONPATH=. python benchmarks/issue15_table.py --rows d4-r1-2 --budget 0.5"
    printed = capsys.readouterr().out
    assert "| row | domain | norm | before certified |" in printed and "--rows d4-r1-2" in printed


def test_row_names_are_unique_and_the_biased_layer_is_lower_bounds():
    script = load("issue15_table")
    names = [row.name for row in script.ROWS]
    assert len(names) == len(set(names))
    namespace: dict = {}
    exec(load("lower_bound").BIASED_SNIPPET.split("weights = as_weights(layer)")[0], namespace)
    for ours, theirs in zip(script.biased_d4_layer().state_dict().values(), namespace["layer"].state_dict().values()):
        assert torch.equal(ours, theirs)
