"""Claim (MATH.md section 4, "Known mistakes"): dividing the whole inf-norm constant by sqrt(d), i.e.
Lip_inf(F) <= (4 W + 1) / sqrt(d) ||W^O^T||_inf ..., is FALSE: N = 5, D = 4, H = 1, identity weights has an input
with ||J||_inf = 2.26 > (4 W_0(4/e) + 1) / 2 = 1.94, while the correct constant 4 W + 1/sqrt(d) = 3.37 holds there.

The witness X below was found by gradient ascent (Adam, 128 restarts, 400 steps) on the torch closed form; here
||J(X)||_inf is evaluated in float64 with the numpy transcription of the closed form (proved in `jacobian_l2`,
checked against the SymPy oracle in step s0 of `bound_2_chain` and `bound_inf_chain`). The margin
(0.32) is far above float64 rounding, so the numeric check is conclusive for this X (CHECKED).
"""

from __future__ import annotations

import numpy as np
from scipy.special import lambertw

from proofs._check import numeric
from proofs._l2numeric import Layer, layer_jacobian
from proofs._result import ProofResult, combine

CLAIM = ("The variant (4W + 1)/sqrt(d) of the inf-norm constant is false (N=5, D=4, identity weights: ||J||_inf = "
         "2.26 > 1.94), and 4W + 1/sqrt(d) holds at that input")

WITNESS = np.array([[-2.194685, 0.63495, 0.0166, 0.368773], [-2.194685, 0.63495, 0.0166, 0.368773],
                    [1.199295, -0.496377, 1.147926, -0.762553], [-0.497695, 0.069286, 0.582263, -0.19689],
                    [1.199295, -0.496377, 1.147926, -0.762553]])


def prove() -> ProofResult:
    N, D = WITNESS.shape
    identity = np.eye(D)[None]
    J = layer_jacobian(WITNESS, Layer(identity, identity, np.eye(D)))
    value = float(np.abs(J).sum(axis=1).max())
    W = float(np.real(lambertw((N - 1) / np.e)))
    wrong, right = (4 * W + 1) / np.sqrt(D), 4 * W + 1 / np.sqrt(D)
    return combine(CLAIM, [
        numeric(value > wrong + 1e-6, f"||J(X)||_inf = {value:.6f} > (4W + 1)/sqrt(d) = {wrong:.6f} (the variant fails)"),
        numeric(value <= right, f"||J(X)||_inf = {value:.6f} <= 4W + 1/sqrt(d) = {right:.6f} (the theorem holds here)"),
    ])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
