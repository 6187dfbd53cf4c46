#!/usr/bin/env python3
"""Runs a PyTorch script with TF32 off everywhere, so its fp32 means what demi's fp32 means.

PyTorch's default lets cuDNN convolutions round fp32 inputs to TF32
(torch.backends.cudnn.allow_tf32 = True); demi's fp32 never does unless set_allow_tf32(true).
Usage: torch_strict_fp32.py SCRIPT [ARGS...]   (e.g. crosscheck/torch_train_step.py --device cuda)
"""
import runpy
import sys

import torch

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
