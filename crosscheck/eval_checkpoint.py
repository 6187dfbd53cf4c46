#!/usr/bin/env python3
"""Evaluates a demi checkpoint in PyTorch: the net's twin (torch_nets.py) loads train_cifar's
model.safetensors with load_state_dict(strict=True) and classifies CIFAR-10's test images (decoded
by Pillow, normalised as demi's loader does).

Usage: eval_checkpoint.py MODEL.safetensors NET [--data-dir DIR]
  NET: a name of torch_nets.NETS (SmallCNN, AirNet); DIR: the image-folder tree with test/<class>/
  (default $DEMI_CIFAR10, else ./data/cifar-10).
Needs torch, safetensors and pillow (pip install into the venv of scripts/crosscheck-pytorch).
"""
import argparse
import os
import sys

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file

import torch_nets

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)  # datasets/data_loader.cpp


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("net", choices=list(torch_nets.NETS))
    parser.add_argument("--data-dir", default=os.environ.get("DEMI_CIFAR10") or "./data/cifar-10")
    args = parser.parse_args()
    test = os.path.join(args.data_dir, "test")
    if not os.path.isdir(test):
        sys.exit(f"eval_checkpoint: no test/ image folders in {args.data_dir}: pass --data-dir DIR or set "
                 f"DEMI_CIFAR10 to the CIFAR-10 image-folder tree")
    net = torch_nets.make(args.net)
    net.load_state_dict(load_file(args.model), strict=True)
    net.eval()
    images, labels = [], []
    for k, name in enumerate(sorted(os.listdir(test))):
        for f in sorted(os.listdir(os.path.join(test, name))):
            rgb = Image.open(os.path.join(test, name, f)).convert("RGB")
            images.append(np.asarray(rgb, dtype=np.float32) / 255.0)
            labels.append(k)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2)
    x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    y = torch.tensor(labels)
    with torch.no_grad():
        pred = torch.cat([net(x[i:i + 500]).argmax(1) for i in range(0, len(x), 500)])
    print(f"{args.net} in PyTorch {torch.__version__}: {len(y)} test images, "
          f"accuracy {(pred == y).float().mean().item():.4f}")


if __name__ == "__main__":
    main()
