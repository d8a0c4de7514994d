"""Claim, as written in MATH.md section 1: "Counterexample with D = 1 and logits -(a x_i - b x_j)^2: put x_i = t
and two other tokens at (a/b) t +- delta; then d f_i / d x_i grows without bound in t."

Read literally (delta fixed), this is FALSE: for a != b the token-i logit -(a - b)^2 t^2 vanishes against the two
equal logits -(b delta)^2, so P_i -> (0, 1/2, 1/2) and d f_i/d x_i -> 2 a b delta^2, a finite limit (SymPy
`limit`, N = 3). The theorem itself holds with delta growing with t: see `untied_l2_not_lipschitz`.
This proof reports the literal claim; it FAILS until MATH.md states the witness with delta = delta(t). It is\nmarked ERRATUM, so `python -m proofs` reports it without failing the run (`--strict` fails on it).
"""

from __future__ import annotations

import sympy as sp

from proofs._check import Check, fact
from proofs._result import ProofResult, combine
from proofs.untied_l2_not_lipschitz import PAIRS, witness_limit

ERRATUM = ("MATH.md section 1's untied-L2 counterexample with delta fixed has a finite limit 2 a b delta^2; with "
           "delta = |a - b| t / (2 b) it is unbounded, which `untied_l2_not_lipschitz` proves (PROVED): untied L2 "
           "is not Lipschitz, and certify's refusal stands.")

CLAIM = ("MATH.md's untied-L2 witness as stated: x_i = t, two tokens at (a/b) t +- delta (delta fixed) makes "
         "d f_i/d x_i unbounded in t")


def prove() -> ProofResult:
    t = sp.Symbol("t", positive=True)
    parts: list[Check] = []
    for a, b in PAIRS:
        for delta in (sp.Integer(1), sp.Integer(3)):
            limit = witness_limit(a, b, delta, t)
            parts.append(fact(limit == sp.oo, f"a={a}, b={b}, delta={delta}: lim_(t->oo) d f_1/d x_1 = {limit}"
                              + ("" if limit == sp.oo else f" (finite; 2 a b delta^2 = {2 * a * b * delta ** 2})")))
    return combine(CLAIM, parts)


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
