"""Runnable proofs of the claims certify relies on (MATH.md). See README.md.

`python -m proofs` runs every module of this package; `python -m proofs.<name>` runs one.
"""

from ._result import ProofResult as ProofResult
from ._result import Status as Status
from ._result import combine as combine
from ._runner import main as main
from ._runner import proof_names as proof_names
from ._runner import run_all as run_all
from ._runner import run_module as run_module
from ._runner import standalone as standalone
