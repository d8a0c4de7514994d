"""`python -m proofs`: run all proofs, write the Markdown report, exit non-zero if a claim is below what certify needs of it (REQUIRES)."""

from ._runner import main

raise SystemExit(main())
