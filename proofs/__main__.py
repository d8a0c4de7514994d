"""`python -m proofs`: run all proofs, write the Markdown report, exit non-zero if any claim FAILED."""

from ._runner import main

raise SystemExit(main())
