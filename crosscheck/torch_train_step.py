#!/usr/bin/env python3
"""Images/s of one PyTorch training step (and one inference forward) of the nets in torch_nets.py:
the PyTorch side of scripts/bench-vs-pytorch and scripts/gpu-check, timed by the rule
benchmarks/bench_train_step.cpp times demi by, so that the two compare row by row.

Timing rule. A training step is zero_grad, forward, cross-entropy loss, backward and an SGD step
(lr 0.01, Nesterov momentum 0.9, weight decay 5e-4); fp16 adds the GradScaler's scale, step and
update. Inputs are N(0, 1) images and uniform labels, drawn once (no data-dependent control flow,
so random data times like real data). `--warmup` untimed steps, then `--steps` steps timed one by
one with perf_counter (on CUDA each waits for the device); a row reports their median, min and
max, and images/s = batch / median. FLOP rates count a training image as 3 x the forward FLOPs,
forward FLOPs = 2 x the multiply-adds of the convolutions and linear layers.

Modes: fp32; bf16 (autocast); fp16 (autocast + GradScaler, PyTorch's AMP recipe); a "_cl" suffix
runs the model and images in channels_last, a "_compiled" suffix (after any "_cl") runs the model
through torch.compile (default mode; the optimizer stays eager; compiling happens in the warm-up
steps). A compiled mode that fails to compile (no Triton, say) is reported and left out of the JSON.
Inference rows time model(x) in eval mode, no grad.

Usage: torch_train_step.py [--device cpu|cuda] [--threads N] [--steps N] [--warmup N]
                           [--batches 128,256] [--nets SmallCNN,AirNet]
                           [--train-modes fp32,fp32_cl,bf16,bf16_cl] [--infer-modes fp32,fp32_cl,bf16]
                           [--quick] [--json OUT]
--quick: 1 warm-up and 2 timed steps at batch 32. --infer-modes "" times no inference.

JSON (read by scripts/lib/compare_bench.py): {"torch", "threads", "aten_cpu_capability",
"fp16_autocast": [outcome, warnings], "nets": {NET: {"params", "macs_per_img", "rows":
[[layer, MACs], ...], "train": {"MODE@BATCH": {"median_s", "min_s", "max_s", "img_s", "gflops"}},
"infer": {...}}}}.
"""
import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when run through runpy
import torch_nets  # noqa: E402

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def parse_mode(mode):
    """'bf16_cl_compiled' -> ('bf16', torch.channels_last, True)."""
    precision, *suffixes = mode.split("_")
    compiled = suffixes[-1:] == ["compiled"]
    layout = suffixes[:-1] if compiled else suffixes
    if precision not in ("fp32", *HALF) or layout not in ([], ["cl"]):
        raise SystemExit(f"torch_train_step: unknown mode '{mode}' (fp32, bf16 or fp16, optionally with _cl, "
                         "then optionally _compiled)")
    return precision, torch.channels_last if layout else torch.contiguous_format, compiled


def median_min_max(run_once, warmup, steps):
    for _ in range(warmup):
        run_once()
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        run_once()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), min(seconds), max(seconds)


def setup(net_name, batch, mode, device):
    """The seeded model and one batch of random images and labels, in the mode's layout."""
    precision, layout, compiled = parse_mode(mode)
    torch.manual_seed(0)
    model = torch_nets.make(net_name).to(device, memory_format=layout)
    if compiled:
        model = torch.compile(model)
    x = torch.randn(batch, 3, 32, 32, device=device).contiguous(memory_format=layout)
    y = torch.randint(0, 10, (batch,), device=device)
    return precision, model, x, y


def wait(device):
    if device == "cuda":
        torch.cuda.synchronize()


def autocast(device, precision):
    """fp32 runs outside any autocast region, as a plain PyTorch script does."""
    return torch.autocast(device, dtype=HALF[precision]) if precision in HALF else contextlib.nullcontext()


def grad_scaler(device):
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device)
    return torch.cuda.amp.GradScaler()  # torch < 2.3 has it for CUDA only


def time_train(net_name, batch, mode, device, warmup, steps):
    precision, model, x, y = setup(net_name, batch, mode, device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    scaler = grad_scaler(device) if precision == "fp16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = F.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        wait(device)

    return median_min_max(step, warmup, steps)


def time_infer(net_name, batch, mode, device, warmup, steps):
    precision, model, x, _ = setup(net_name, batch, mode, device)
    model.eval()

    def forward():
        with torch.no_grad(), autocast(device, precision):
            model(x)
        wait(device)

    return median_min_max(forward, warmup, steps)


def probe_fp16_autocast():
    """Whether this torch runs fp16 autocast on the CPU, and what it warned while trying."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autocast("cpu", dtype=torch.float16):
                out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
            outcome = f"ran, output dtype {out.dtype}"
        except Exception as e:  # noqa: BLE001 - the failure is the answer
            outcome = f"EXCEPTION: {type(e).__name__}: {e}"
    return outcome, [str(w.message).replace("\n", " ") for w in caught]


def row(batch, timing, flops_per_image):
    median, low, high = timing
    img_s = batch / median
    return {"median_s": median, "min_s": low, "max_s": high, "img_s": img_s, "gflops": img_s * flops_per_image / 1e9}


def print_row(kind, mode, batch, r, what):
    print(f"  {kind} {mode:16s} B={batch:4d}: median {r['median_s'] * 1e3:8.1f} ms (min {r['min_s'] * 1e3:.1f}, "
          f"max {r['max_s'] * 1e3:.1f})  {r['img_s']:8.0f} img/s  {r['gflops']:6.1f} GFLOP/s ({what})", flush=True)


def bench_net(name, args):
    """The net's size, then a row per batch and mode."""
    net = torch_nets.make(name)
    params = sum(p.numel() for p in net.parameters())
    macs, layers = torch_nets.forward_macs(net)
    forward_flops = 2 * macs
    print(f"\n== {name}: {params:,} parameters, {macs / 1e6:.2f} M forward MACs per image "
          f"(training: {3 * forward_flops / 1e6:.1f} M FLOPs per image)")
    for layer, layer_macs in layers:
        print(f"   {layer:40s} {layer_macs:>12,d}")
    result = {"params": params, "macs_per_img": macs, "rows": layers, "train": {}, "infer": {}}
    for batch in args.batches:
        for kind, modes, timer, flops, what in (("train", args.train_modes, time_train, 3 * forward_flops, "3 x forward"),
                                                ("infer", args.infer_modes, time_infer, forward_flops, "forward")):
            for mode in modes:
                try:
                    timing = timer(name, batch, mode, args.device, args.warmup, args.steps)
                except Exception as e:  # noqa: BLE001 - torch.compile's failures vary by machine
                    if not parse_mode(mode)[2]:
                        raise
                    print(f"  {kind} {mode} B={batch}: torch.compile failed, no row: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}", flush=True)
                    continue
                r = result[kind][f"{mode}@{batch}"] = row(batch, timing, flops)
                print_row(kind, mode, batch, r, what)
    return result


def parse_args():
    listed = lambda text: [s for s in text.split(",") if s]  # noqa: E731
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--steps", type=int, default=12, help="timed steps (default 12)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    ap.add_argument("--batches", type=listed, default="128,256")
    ap.add_argument("--nets", type=listed, default=",".join(torch_nets.NETS))
    ap.add_argument("--train-modes", type=listed, default="fp32,fp32_cl,bf16,bf16_cl")
    ap.add_argument("--infer-modes", type=listed, default="fp32,fp32_cl,bf16")
    ap.add_argument("--quick", action="store_true", help="a smoke test: batch 32, 1 + 2 steps")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.warmup, args.batches = 2, 1, ["32"]
    args.batches = [int(b) for b in args.batches]
    for mode in args.train_modes + args.infer_modes:
        parse_mode(mode)
    unknown = [n for n in args.nets if n not in torch_nets.NETS]
    if unknown:
        ap.error(f"--nets: unknown {', '.join(unknown)}; choose from {', '.join(torch_nets.NETS)}")
    return args


def main():
    args = parse_args()
    default_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    config = torch.__config__.show()
    capability = config.split("CPU capability usage:")[1].split()[0] if "CPU capability usage:" in config else "?"
    fp16 = probe_fp16_autocast()
    print(f"python {platform.python_version()} torch {torch.__version__}, threads {torch.get_num_threads()} "
          f"(default {default_threads}), mkldnn {torch.backends.mkldnn.is_available()}, "
          f"ATen CPU capability {capability}, device {args.device}")
    print(f"fp16 autocast on the CPU: {fp16[0]}; warnings: {fp16[1]}")
    results = {"torch": torch.__version__, "threads": args.threads, "aten_cpu_capability": capability,
               "fp16_autocast": list(fp16), "nets": {}}
    for name in args.nets:
        results["nets"][name] = bench_net(name, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
