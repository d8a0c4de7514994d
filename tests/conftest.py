import os
import sys

import torch
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))  # tests/problems.py
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
settings.register_profile("certify", deadline=None, max_examples=25, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "certify"))
