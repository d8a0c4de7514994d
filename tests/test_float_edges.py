"""Certificates at the edges of floating point (issue 16, "Wrong certificates"): underflow, subnormal precision,
overflow, float32 inverses, and a scale fuzz over weights from 1e-300 to 1e300 in both dtypes.

Every attained or exact value here is computed independently of the code under test: in mpmath
(`tests/exact_attention.py`, forward-mode derivatives at a precision that follows the logits) or by a formula.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import event, given, strategies as st

from certify import AttentionWeights, CertifyError, ContractiveL2MultiheadAttention, NotLipschitzError, certify_layer
from certify.attention import attention
from certify.bounds import castin_bound, factorised_bound, paper_bound
from certify.bounds.local._structured import product_norm_upper
from certify.cli import main
from certify.invertible import contraction_certificate, invert
from certify.jacobian import jacobian, jacobian_norm
from certify.sdp import lambda_min_lower
from exact_attention import jacobian_norm as exact_jacobian_norm
from problems import F64, random_weights

WITNESS_N2 = mpmath.mpf("1.4072520")
"""For D = d = 1, N = 2, the projected points y = (0, 1.4072520) nearly attain c_2(2, 1) = 1.6016."""


def scalar_layer(kind: str, q: float, v: float, o: float, k: float | None = None, dtype=F64) -> AttentionWeights:
    """D = H = d = 1: W^Q = q, W^K = k (tied: q), W^V = v, W^O = o."""
    t = lambda x: torch.tensor([[[x]]], dtype=dtype)  # noqa: E731
    return AttentionWeights(kind, t(q), t(q if k is None else k), t(v), torch.tensor([[o]], dtype=dtype))


# ---- item 1: underflow became a "certified" 4.94e-324 ------------------------------------------------------------

def test_paper_bound_survives_an_underflowing_W_Q_power():
    """||W^Q||^4 = 1e-360 underflowed to 0 and paper certified 4.94e-324; 1.6016e120 is attained."""
    w = scalar_layer("l2", 1e-90, 1e150, 1e150)
    attained = exact_jacobian_norm([[0], [WITNESS_N2 * mpmath.mpf(1e90)]], w, "2")
    assert attained > mpmath.mpf("1.6016e120")
    value = paper_bound(w, 2, "2").value
    assert attained <= value <= 2 * attained  # sqrt(2)(4 W0(1/e) + 1) = 2.99 against c_2(2, 1) = 1.6016


def test_factorised_bound_survives_an_underflowing_product():
    """G = W^O W^V W^Q = 1e-190 fine, but W^O W^V = 1e-340 underflowed: factorised certified 4.9e-324."""
    w = scalar_layer("l2", 1e150, 1e-170, 1e-170)
    attained = exact_jacobian_norm([[0], [WITNESS_N2 * mpmath.mpf(1e-150)]], w, "2")
    assert attained > mpmath.mpf("1.6016e-40")
    value = factorised_bound(w, 2, "2").value
    assert attained <= value <= 1.01 * attained


def test_castin_bound_survives_an_underflowing_value_weight():
    """DP head W^Q = W^K = 1, W^V = 1e-170, W^O = 1e200, R = 1: castin certified 5e-324, 1.6015e30 attained."""
    w = scalar_layer("dp", 1.0, 1e-170, 1e200, k=1.0)
    attained = exact_jacobian_norm([[-1], [1]], w, "2")
    assert attained > mpmath.mpf("1.6015e30")
    value = castin_bound(w, 2, 1.0, "2").value
    assert attained <= value < math.inf


@pytest.mark.parametrize("method", [paper_bound, factorised_bound])
def test_subnormal_intermediate_keeps_full_precision(method):
    """N = 1, D = 1: J = W^O W^V (W^Q)^2 exactly. W^Q = 6.4508e-81 makes ||W^Q||^4 subnormal; paper certified
    4.15840e-161 against the exact 4.16126e-161."""
    q = 6.4508e-81
    w = scalar_layer("l2", q, 1.0, 1.0)
    exact = mpmath.mpf(q) ** 2
    value = method(w, 1, "2").value
    assert exact <= value <= exact * (1 + 1e-8)
    assert exact_jacobian_norm([[mpmath.mpf(1)]], w, "2") == pytest.approx(exact, rel=1e-30)


def test_underflow_no_longer_certifies_a_contraction():
    """Lip >= 3.2 (attained), but paper's 5e-324 made it a 'contraction' and invert() 'converged' with error
    bound 1e-233 while ||g(X) - Y|| was 4e90."""
    w = scalar_layer("l2", 1e-90, 2e90, 1e90)
    attained = exact_jacobian_norm([[0], [WITNESS_N2 * mpmath.mpf(1e90)]], w, "2")
    assert attained > 3.2
    assert paper_bound(w, 2, "2").value >= attained
    with pytest.raises(NotLipschitzError, match="not certified invertible"):
        contraction_certificate(w, 2, "2")
    with pytest.raises(NotLipschitzError, match="not certified invertible"):
        invert(w, torch.tensor([[[0.0], [1.4e90]]], dtype=F64), 1e-6, "2")


@pytest.mark.parametrize("method", ["bnb", "sdp"])
def test_local_branch_and_bound_survives_an_underflowing_weight_product(method):
    """Tied L2, W^Q = 1e90, W^V = W^O = 1e-170, tokens in Ball(2e-90): W^V W^O = 1e-340 underflowed inside the
    interval enclosure and was then multiplied by W^Q W^Q^T = 1e180; bnb certified 2e-300 against 1.6016e-160."""
    w = scalar_layer("l2", 1e90, 1e-170, 1e-170)
    attained = exact_jacobian_norm([[0], [WITNESS_N2 * mpmath.mpf(1e-90)]], w, "2")
    assert attained > mpmath.mpf("1.6016e-160")
    report = certify_layer(w, 2, "2", radius=2e-90, methods=[method], lower=False, time_budget=1.0)
    assert attained <= report.certificates[0].value < 10 * attained


def test_weight_product_norm_survives_underflow():
    """||W^O^T W^V^T W^Q W^Q^T|| with W^O = W^V = 1e-170, W^Q = 1e90: the partial product 1e-340 underflowed, and
    only norm2_upper's absolute terms kept the old bound valid (4.9e-144, 1e16 times the exact 1e-160)."""
    one = lambda x: np.array([[x]])  # noqa: E731
    exact = mpmath.mpf(1e-170) ** 2 * mpmath.mpf(1e90) ** 2
    assert exact <= product_norm_upper(one(1e-170), one(1e-170), one(1e90), one(1e90)) <= exact * (1 + 1e-8)


# ---- item 1: overflow is a clear refusal, never a crash ------------------------------------------------------------

@pytest.mark.parametrize("methods", [None, ["castin"], ["bnb"], ["sdp"]])
def test_huge_dp_weights_are_refused(methods):
    """W ~ 1e100 in a DP layer: a raw Cholesky ValueError (sdp) or OverflowError before; now InvalidInputError."""
    w = scalar_layer("dp", 1e100, 1e100, 1e100, k=1e100)
    with pytest.raises(CertifyError, match="float64"):
        certify_layer(w, 2, "2", radius=1.0, methods=methods, lower=False, time_budget=1.0)


@pytest.mark.parametrize("methods", [None, ["castin"], ["bnb"], ["sdp"]])
def test_huge_radius_is_refused(methods):
    """radius = 1e200: R^4 overflowed (OverflowError) in castin and in the local branch and bound."""
    w = scalar_layer("dp", 1.0, 1.0, 1.0, k=1.0)
    with pytest.raises(CertifyError, match="float64"):
        certify_layer(w, 2, "2", radius=1e200, methods=methods, lower=False, time_budget=1.0)


def test_cli_refuses_a_huge_radius(capsys, tmp_path):
    path = tmp_path / "dp.pt"
    torch.save(torch.nn.MultiheadAttention(4, 2, batch_first=True).state_dict(), path)
    code = main(["layer", str(path), "--heads", "2", "--add-zero-attn", "no", "--tokens", "2", "--norm", "2", "--radius", "1e200", "--quiet",
                 "--time-budget", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "error:" in err and "float64" in err and "Traceback" not in err


def test_lambda_min_lower_with_overflowing_shifts_stays_valid():
    """S ~ 1e307: every shifted copy S + s I overflows; Cholesky must not crash and the bound must hold."""
    S = np.array([[1e307, -1.5e307], [-1.5e307, 1e307]])
    bound = lambda_min_lower(S)
    assert bound <= -0.5e307  # exact lambda_min = 1e307 - 1.5e307


# ---- item 2: float32 inverses --------------------------------------------------------------------------------------

def float64_inverse(weights: AttentionWeights, Y: torch.Tensor) -> torch.Tensor:
    """g^{-1}(Y) for the exact map with these (float32) weights: the iteration in float64 to a fixed point."""
    w64, Y64 = weights.to(F64), Y.to(F64)
    X = Y64
    for _ in range(2000):
        X_next = Y64 - attention(X, w64)
        if torch.equal(X_next, X):
            break
        X = X_next
    return X


@pytest.mark.parametrize("tolerance", [1e-9, 1e-6])
def test_float32_inverse_bound_covers_the_true_error(tolerance):
    """float32 ContractiveL2MultiheadAttention: tol = 1e-9 reported converged with error bound 0 (true error
    ~6e-8), and tol = 1e-6 bounded 1.1e-8 against a true 5.9e-8; the bound must hold, and a tolerance float32
    cannot certify is reported as not met."""
    torch.manual_seed(2)
    layer = ContractiveL2MultiheadAttention(4, 2, max_tokens=4)
    Y = torch.randn(1, 4, 4)
    result = invert(layer, Y, tolerance, "inf")
    true = float((result.X.to(F64) - float64_inverse(layer.attention_weights(), Y)).abs().max())
    assert true > 1e-9  # float32 cannot get closer
    assert result.error_bound >= true
    assert result.converged == (result.error_bound <= tolerance)
    if tolerance == 1e-9:
        assert not result.converged and "float32" in result.message


def test_float32_layer_inverted_in_float64_meets_1e_9():
    torch.manual_seed(2)
    layer = ContractiveL2MultiheadAttention(4, 2, max_tokens=4)
    Y = torch.randn(1, 4, 4)
    result = invert(layer, Y, 1e-9, "inf", dtype=F64)
    true = float((result.X - float64_inverse(layer.attention_weights(), Y)).abs().max())
    assert result.X.dtype == F64 and result.converged and true <= result.error_bound <= 1e-9


# ---- guard it for good: weight scales from 1e-300 to 1e300 in both dtypes ------------------------------------------

EXPONENT_RANGE = {F64: 300.0, torch.float32: 36.0}
"""|log10 scale| of a weight tensor: float64 reaches 1e+-300 (products then leave the float64 range both ways);
float32 reaches 1e+-36 (entries up to 3e36 stay below its 3.4e38)."""


def _unit(shape, generator) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=F64)


@st.composite
def scaled_layers(draw, kind: str, dtype: torch.dtype):
    """(weights, N, norm, radius, witness X as mpmath numbers): unit Gaussian weights times 10^e with an independent
    e per tensor, or (half the cases) with e_O chosen so that the Lipschitz constant, not its factors, lies within
    1e+-150 (where underflow of an intermediate used to give 5e-324); the witness is the best of 16 random
    configurations for the unit layer, rescaled to the layer (X = Z / s_Q for L2; tokens of norm t <= R with
    t^2 s_Q s_K <= 1 for DP)."""
    top = EXPONENT_RANGE[dtype]
    H, d, D, N = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    norm = draw(st.sampled_from(["2", "inf"]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**20)))
    e = {n: draw(st.floats(-top, top)) for n in ("Q", "K", "V", "O")}
    if draw(st.booleans()):  # balanced: W^O makes up for the others, so the constant lies well within the range
        others = e["V"] + (2 * e["Q"] if kind == "l2" else 0.0)
        e["O"] = min(top, max(-top, draw(st.floats(-top / 2, top / 2)) - others))
    unit = {"Q": _unit((H, D, d), g), "K": _unit((H, D, d), g), "V": _unit((H, D, d), g), "O": _unit((H * d, D), g)}
    scaled = {n: (unit[n] * 10.0 ** e[n]).to(dtype) for n in unit}
    radius = None
    biases = {}
    if kind == "l2":
        w = AttentionWeights("l2", scaled["Q"], scaled["Q"], scaled["V"], scaled["O"])
        effective = AttentionWeights("l2", unit["Q"], unit["Q"], unit["V"], unit["O"])
        t = mpmath.power(10, -e["Q"])
        Z = torch.randn(16, N, D, generator=g, dtype=F64)
    else:
        radius = 10.0 ** draw(st.floats(-top / 3, top / 3))
        if draw(st.booleans()):
            biases = {n: (_unit((H, d), g) * 10.0 ** draw(st.floats(-min(top, 60), min(top, 60)))).to(dtype)
                      for n in ("b_Q", "b_K")}
        w = AttentionWeights("dp", scaled["Q"], scaled["K"], scaled["V"], scaled["O"], **biases)
        t = min(mpmath.mpf(radius), mpmath.power(10, -(e["Q"] + e["K"]) / 2))
        c = float(t * mpmath.power(10, (e["Q"] + e["K"]) / 2))  # logit scale of the unit layer, <= 1
        effective = AttentionWeights("dp", unit["Q"] * math.sqrt(c), unit["K"] * math.sqrt(c), unit["V"], unit["O"])
        Z = torch.randn(16, N, D, generator=g, dtype=F64)
        Z = Z / Z.norm(dim=-1, keepdim=True).clamp_min(1e-3) * 0.999  # tokens on the sphere of radius 0.999
    best = int(jacobian_norm(jacobian(Z, effective), norm).argmax())
    X = [[mpmath.mpf(float(z)) * t for z in row] for row in Z[best].tolist()]
    return w, N, norm, radius, X


def check_scaled(method, case) -> None:
    """Certified >= attained at the witness (mpmath), or a CertifyError; counts go to hypothesis events."""
    w, N, norm, radius, X = case
    try:
        value = (method(w, N, norm) if radius is None else method(w, N, radius, norm)).value
    except CertifyError as error:
        assert "float64" in str(error)
        beyond = exact_jacobian_norm(X, w, norm) > mpmath.mpf(np.finfo(np.float64).max)
        event(f"refused ({type(error).__name__}), attained {'beyond' if beyond else 'within'} the float64 range")
        return
    attained = exact_jacobian_norm(X, w, norm)
    assert mpmath.mpf(value) >= attained, (value, attained)
    assert math.isfinite(value) and value > 0
    event("certified >= attained")


@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["float64", "float32"])
@given(data=st.data())
def test_scale_fuzz_paper(dtype, data):
    check_scaled(paper_bound, data.draw(scaled_layers("l2", dtype)))


@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["float64", "float32"])
@given(data=st.data())
def test_scale_fuzz_factorised(dtype, data):
    check_scaled(factorised_bound, data.draw(scaled_layers("l2", dtype)))


@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["float64", "float32"])
@given(data=st.data())
def test_scale_fuzz_castin(dtype, data):
    check_scaled(castin_bound, data.draw(scaled_layers("dp", dtype)))


def test_an_unbounded_interval_entry_gives_an_unbounded_einsum_entry_not_nan():
    """point_einsum on an interval with an entry [-inf, inf] (a softmax row enclosed to nothing on a wide box): the
    midpoint is nan there, and every output entry it touches must come out as [-inf, inf], the others still
    enclosing the exact products."""
    from certify.bounds.local._enclosure import point_einsum
    from certify.interval import Interval

    lo = np.array([[-np.inf, 1.0], [0.0, 1.0]])
    hi = np.array([[np.inf, 2.0], [0.5, 1.0]])
    W = np.array([[1.0, -3.0], [2.0, 0.5]])
    with np.errstate(invalid="raise"):  # no nan may be formed and left behind unnoticed
        try:
            out = point_einsum("ij,jk->ik", Interval(lo, hi), W)
        except FloatingPointError:
            pytest.fail("point_einsum formed nan from an unbounded entry")
    assert not np.any(np.isnan(out.lo)) and not np.any(np.isnan(out.hi))
    assert np.all(out.lo[0] == -np.inf) and np.all(out.hi[0] == np.inf)
    rng = np.random.default_rng(0)
    for _ in range(100):
        X = lo[1] + (hi[1] - lo[1]) * rng.random(2)
        value = X @ W
        assert np.all(out.lo[1] <= value) and np.all(value <= out.hi[1])


def test_attained_values_keep_the_scale_of_a_tiny_value_map_beside_large_biases():
    """W_V of 1e-155 beside b_V = b_K = 1: the Jacobian is about 1e-155, and the search, the attained value at X0
    and the certified bound must all say so (the forward pass's v_l - vbar_i used to leave 1e-16 of roundoff, which
    the search reported as attained, far above the certified 4.7e-155)."""
    import dataclasses

    from certify._domain import EpsBall
    from certify.adversarial import lower_bound
    from certify.adversarial._attained import attained_norm
    from certify.bounds.local._taylor import taylor_bound

    weights = random_weights("dp", 2, 2, scale=1.0, seed=4, bias=True)
    weights = dataclasses.replace(weights, W_V=weights.W_V * 1e-155, b_V=torch.ones_like(weights.b_V),
                                  b_K=torch.ones_like(weights.b_K))
    X0 = torch.randn(3, weights.D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    domain = EpsBall(X0, 1e-2, "inf")
    upper = taylor_bound(weights, 3, "inf", domain, seeds="slopes").value
    found = lower_bound(weights, 3, "inf", domain, seconds=3.0).value
    at_centre = attained_norm(X0, weights, "inf")[0]
    assert 1e-156 < at_centre <= found <= upper < 1e-153


def test_derivatives_through_the_forward_pass_use_the_bias_free_equivalent():
    """`jacobian_equivalent` keeps J exactly (the closed form agrees) and makes reverse mode through the forward pass
    (the matrix-free search's `row_block`) accurate where the raw biased forward pass is roundoff."""
    import dataclasses

    from certify.adversarial._objectives import row_block
    from certify.attention import jacobian_equivalent

    weights = random_weights("dp", 2, 2, scale=1.0, seed=4, bias=True)
    weights = dataclasses.replace(weights, W_V=weights.W_V * 1e-155, b_V=torch.ones_like(weights.b_V))
    X = torch.randn(1, 3, weights.D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    equivalent = jacobian_equivalent(weights)
    J = jacobian(X, weights)[0, 0]  # row block of token 0: (D, N, D)
    assert torch.allclose(jacobian(X, equivalent), jacobian(X, weights), rtol=1e-12, atol=0.0)
    assert torch.allclose(row_block(X, equivalent, 0, create_graph=False)[0], J, rtol=1e-9, atol=0.0)
    assert (row_block(X, weights, 0, create_graph=False)[0] - J).abs().max() > 1e3 * J.abs().max()
