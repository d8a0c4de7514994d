"""certify tightness (paper Sec. 5.1, MATH.md section 5) in quick mode: a tiny N range, short budgets."""

from __future__ import annotations

import json
import math

import pytest

from certify.adversarial import TightnessRow, config_weights, tightness
from certify.adversarial._tightness import check_against_uppers, default_points
from certify.bounds import paper_bound
from certify.cli import main


@pytest.fixture(scope="module")
def unit_rows(shared):
    # deterministic (steps, not seconds); the naive baseline gets the wall time the search used
    return shared("tightness-unit-rows", lambda: tightness("unit", ("inf", "2"), max_tokens=4, seconds=None,
                                                           baseline=True, restarts=16, steps=150))


def test_unit_rows_are_sound_and_near_the_paper_bound_in_the_inf_norm(unit_rows):
    assert [(r.N, r.norm) for r in unit_rows] == [(N, n) for N in (2, 4) for n in ("inf", "2")]
    check_against_uppers(unit_rows)
    weights = config_weights("unit")
    for row in unit_rows:
        assert set(row.uppers) == {"paper", "factorised"}
        assert row.uppers["paper"] == paper_bound(weights, row.N, row.norm).value
        assert row.lower <= min(row.uppers.values())
        if row.norm == "inf":  # the exact N = 2 constant 1.6016... is 0.758 of the paper's 2.1139
            assert row.ratio("paper") >= 0.75
        assert row.lower >= row.naive * (1 - 1e-9)  # not worse than the naive search in the same time
    n2 = [r for r in unit_rows if r.N == 2]
    assert all(r.lower == pytest.approx(1.6016389300117480, rel=1e-4) for r in n2)  # 1e-6: test_adversarial


def test_the_two_norm_ratio_decays_like_the_missing_sqrt_n(unit_rows):
    ratios = [r.ratio("paper") for r in unit_rows if r.norm == "2"]
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] < 0.35  # MATH.md section 4: 0.54, 0.31, 0.19


def test_dp_lower_bound_grows_with_the_radius_and_stays_below_castin():
    points = [(4, 1.0), (4, 8.0)]
    rows = tightness("dp", ("2",), seconds=None, points=points, restarts=6, steps=50)
    check_against_uppers(rows)
    assert rows[1].lower > 10 * rows[0].lower
    assert all(set(r.uppers) == {"castin"} for r in rows)


def test_default_points():
    assert default_points("unit", 16) == [(2, None), (4, None), (8, None), (16, None)]
    assert default_points("dp", 1024)[0] == (8, 1.0) and default_points("dp", 1024)[-1] == (8, 64.0)


def test_check_against_uppers_catches_a_lower_bound_above_an_upper_bound():
    bad = TightnessRow("unit", 2, None, "2", 3.0, {"paper": 2.9}, 0.0, "free")
    with pytest.raises(AssertionError, match="paper"):
        check_against_uppers([bad])


def test_cli_writes_the_table_the_json_and_the_figures(tmp_path, capsys):
    out, path = tmp_path / "figs", tmp_path / "t.json"
    code = main(["tightness", "--config", "unit", "--norm", "both", "--max-tokens", "4", "--seconds", "0.5",
                 "--out", str(out), "--json", str(path), "--quiet"])
    assert code == 0
    text = capsys.readouterr().out
    assert "lower/upper" in text and "factorised" in text
    for suffix in ("png", "svg"):
        assert (out / f"tightness_unit.{suffix}").stat().st_size > 1000
    data = json.loads(path.read_text())
    rows = data["configs"]["unit"]
    assert [(r["N"], r["norm"]) for r in rows] == [(2, "inf"), (2, "2"), (4, "inf"), (4, "2")]
    for r in rows:
        assert r["lower"] <= r["uppers"]["paper"] and len(r["witness"]) == r["N"]
        assert math.isclose(r["ratios"]["paper"], r["lower"] / r["uppers"]["paper"])


def test_cli_rejects_a_bad_config(capsys):
    with pytest.raises(SystemExit):
        main(["tightness", "--config", "nope"])
