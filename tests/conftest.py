import os
import sys

import torch
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))  # tests/problems.py
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
settings.register_profile("certify", deadline=None, max_examples=25, derandomize=True, print_blob=True)
settings.register_profile("scale-fuzz", parent=settings.get_profile("certify"), max_examples=400)  # test_float_edges
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "certify"))
