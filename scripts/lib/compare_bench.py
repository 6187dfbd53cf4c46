#!/usr/bin/env python3
"""Merges bench_train_step's JSON (demi) with crosscheck/torch_train_step.py's (PyTorch) into one table:
net, precision, batch, demi img/s, torch img/s, demi/torch. Used by scripts/bench-vs-pytorch.

torch's best layout is the fair opponent: for fp32 the faster of fp32 and fp32_cl (channels_last),
for bf16 the faster of bf16 and bf16_cl, for fp16 of fp16 and fp16_cl (where run). demi's rows too
are its faster layout where bench_train_step ran both (--memory-format contiguous,channels_last).
torch.compile'd runs (modes with _compiled) make a column of their own, the faster layout again.

With --targets GPU_NAME (scripts/gpu-check), also prints the GPU targets with PASS/FAIL: every row
at least 1.2x PyTorch eager; AirNet's bf16 and fp16 steps at batch 1024 at least 250k images/s on an
H200 (180k on an H100) and at least 1.0x torch.compile'd PyTorch where that column exists.

On CUDA, PyTorch's fp32 convolutions use TF32 by default (torch.backends.cudnn.allow_tf32), demi's
fp32 does not (set_allow_tf32, off). demi's tf32 rows meet torch's default fp32 runs; its fp32 rows
meet --torch-strict-fp32's runs (torch_train_step.py under scripts/lib/torch_strict_fp32.py) when
given, else the default ones.

With --rounds, summarises the merged tables (--json) of several rounds instead: per row the median
demi and torch img/s, the median of the rounds' demi/torch, and each round's demi/torch.
Usage: compare_bench.py [--device cpu|cuda] --demi a.json [b.json ...] --torch c.json [d.json ...]
                        [--torch-strict-fp32 e.json ...] [--json merged.json]
       compare_bench.py --rounds merged1.json merged2.json ... [--json summary.json]
"""
import argparse
import json
import statistics
import sys

TORCH_MODES = {"fp32": ("fp32", "fp32_cl"), "tf32": ("fp32", "fp32_cl"), "bf16": ("bf16", "bf16_cl"),
               "fp16": ("fp16", "fp16_cl")}
EAGER_TARGET = 1.2  # demi / PyTorch eager, every row
# AirNet's bf16 and fp16 steps at batch 1024, images/s, by the GPU's name
AIRNET_TARGET = {"H200": 250_000, "H100": 180_000}


def load(paths):
    out = []
    for p in paths:
        try:
            with open(p) as f:
                out.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"compare_bench: skipping {p}: {e}", file=sys.stderr)
    return out


def demi_rows(runs, device):
    """(net, precision, batch) -> demi's row of its faster layout, rows of `device` only (torch_train_step
    ran on one device); each row gains "layout" ("cl" for channels_last, else "", with "+graph" for a
    step replayed as a CUDA graph)."""
    rows = {}
    for run in runs:
        for r in run.get("rows", []):
            if r.get("device", "").split(":")[0] != device or "img_s" not in r or r.get("checkpoint_activations"):
                continue
            key = (r["net"], r["precision"], r["batch"])
            if key not in rows or r["img_s"] > rows[key]["img_s"]:
                layout = "cl" if r.get("channels_last") else ""
                if r.get("cuda_graph"):
                    layout = (layout or "nchw") + "+graph"
                rows[key] = dict(r, layout=layout)
    return rows


def torch_best(runs, net, precision, batch, suffix=""):
    """(img/s, mode) of torch's fastest layout for this precision (modes with `suffix`, e.g. _compiled), or
    None when it was not run."""
    best = None
    for run in runs:
        train = run.get("nets", {}).get(net, {}).get("train", {})
        for mode in TORCH_MODES.get(precision, ()):
            r = train.get(f"{mode}{suffix}@{batch}")
            if r and (best is None or r["img_s"] > best[0]):
                best = (r["img_s"], mode + suffix)
    return best


def print_targets(merged, gpu_name):
    """The GPU targets, one PASS/FAIL line each; returns how many failed."""
    airnet_floor = next((v for k, v in AIRNET_TARGET.items() if k in gpu_name), None)
    print(f"\ntargets on {gpu_name or 'an unnamed GPU'}:")
    fails = 0

    def verdict(ok, text):
        nonlocal fails
        fails += 0 if ok else 1
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")

    for r in merged:
        what = f"{r['net']} {r['precision']} batch {r['batch']}"
        if r["ratio"] is None:
            print(f"  ----  {what}: no PyTorch eager row")
            continue
        verdict(r["ratio"] >= EAGER_TARGET, f"{what}: {r['ratio']:.2f}x PyTorch eager ({r['torch_mode']}), "
                f"target {EAGER_TARGET}x")
        if r["net"] != "AirNet" or r["precision"] not in ("bf16", "fp16") or r["batch"] != 1024:
            continue
        if airnet_floor:
            verdict(r["demi_img_s"] >= airnet_floor, f"{what}: {r['demi_img_s']:,.0f} images/s, target "
                    f"{airnet_floor:,} on this GPU")
        if r.get("compiled_ratio") is not None:
            verdict(r["compiled_ratio"] >= 1.0, f"{what}: {r['compiled_ratio']:.2f}x torch.compile'd PyTorch "
                    f"({r['compiled_mode']}), target 1.0x")
        else:
            print(f"  ----  {what}: no torch.compile'd row")
    return fails


def summarise_rounds(paths, json_out):
    """Prints and returns the median over rounds of each row of the merged tables at `paths`."""
    rounds = load(paths)
    if not rounds:
        print("compare_bench: no rounds to summarise", file=sys.stderr)
        return 1
    rows = {}  # (net, precision, batch) -> that row in each round, in round order
    for run in rounds:
        for r in run.get("rows", []):
            rows.setdefault((r["net"], r["precision"], r["batch"]), []).append(r)

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    def fmt(v, spec):
        return format(v, spec) if v is not None else "-"

    print(f"\nover {len(rounds)} rounds (each round: demi and torch in turn, one step's median img/s each): "
          f"medians, and every round's demi/torch")
    header = f"{'net':9s} {'precision':9s} {'batch':>5s} {'demi img/s':>11s} {'torch img/s':>12s} " \
             f"{'demi/torch':>10s}  rounds"
    print(header)
    print("-" * (len(header) + 6 * len(rounds)))
    summary = []
    for (net, precision, batch), per_round in rows.items():
        ratios = [r.get("ratio") for r in per_round]
        d = median(r["demi_img_s"] for r in per_round)
        t = median(r.get("torch_img_s") for r in per_round)
        ratio = median(ratios)
        each = " ".join(fmt(x, ".2f") for x in ratios)
        print(f"{net:9s} {precision:9s} {batch:5d} {fmt(d, '11.1f')} {fmt(t, '>12.1f')} {fmt(ratio, '>10.2f')}  {each}")
        summary.append({"net": net, "precision": precision, "batch": batch, "demi_img_s": d, "torch_img_s": t,
                        "ratio": ratio, "ratios": ratios})
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"rounds": len(rounds), "torch": sorted({v for r in rounds for v in r.get("torch", [])}),
                       "threads": sorted({v for r in rounds for v in r.get("threads", [])}),
                       "cpu_isa": sorted({v for r in rounds for v in r.get("cpu_isa", [])}), "rows": summary}, f,
                      indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="which of demi's rows to compare")
    ap.add_argument("--demi", nargs="*", default=[])
    ap.add_argument("--torch", nargs="*", default=[])
    ap.add_argument("--torch-strict-fp32", nargs="*", default=[], help="torch runs with TF32 off, for demi's fp32")
    ap.add_argument("--json", help="also write the merged rows here")
    ap.add_argument("--targets", metavar="GPU_NAME", help="print the GPU targets with PASS/FAIL (the GPU's name picks "
                    "the images/s floor: H200 or H100)")
    ap.add_argument("--rounds", nargs="*", default=None, help="summarise these merged tables (one a round) instead")
    a = ap.parse_args()
    if a.rounds is not None:
        return summarise_rounds(a.rounds, a.json)
    demi_runs, torch_runs, strict_runs = load(a.demi), load(a.torch), load(a.torch_strict_fp32)
    rows = demi_rows(demi_runs, a.device)
    if not rows:
        print("compare_bench: no demi results to compare", file=sys.stderr)
        return 1

    threads = sorted({r.get("threads") for r in demi_runs + torch_runs})
    versions = sorted({r.get("torch", "?") for r in torch_runs})
    # demi's CPU kernels (DEMI_CPU_ISA) and which bf16 products take the level's bf16 tile (DEMI_CPU_BF16_ROUTE)
    isas = sorted({r.get("cpu_isa", "?") + (f" (bf16 route {r['cpu_bf16_route']})" if "cpu_bf16_route" in r else "")
                   for r in demi_runs})
    where = f"CPU, threads {threads}, demi kernels {', '.join(isas)}" if a.device == "cpu" else "CUDA"
    print(f"\ndemi vs PyTorch {', '.join(versions) or '(no torch results)'}, {where}; "
          f"one training step, median of timed steps (higher img/s is better)")
    any_compiled = any(k.split("@")[0].endswith("_compiled") for run in torch_runs
                       for net in run.get("nets", {}).values() for k in net.get("train", {}))
    header = f"{'net':9s} {'precision':9s} {'batch':>5s} {'demi img/s':>11s} {'layout':>6s} {'torch img/s':>12s} " \
             f"{'torch mode':>10s} {'demi/torch':>10s}"
    if any_compiled:
        header += f" {'compiled img/s':>14s} {'demi/compiled':>13s}"
    print(header)
    print("-" * len(header))
    fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
    merged = []
    nets = list(dict.fromkeys(k[0] for k in rows))  # first-seen order
    for net in nets:
        for key in sorted((k for k in rows if k[0] == net), key=lambda k: (k[2], list(TORCH_MODES).index(k[1]))):
            _, precision, batch = key
            d, layout = rows[key]["img_s"], rows[key]["layout"] or "nchw"
            t = torch_best(strict_runs if precision == "fp32" and strict_runs else torch_runs, net, precision, batch)
            c = torch_best(torch_runs, net, precision, batch, "_compiled") if precision != "fp32" else None
            ratio = d / t[0] if t else None
            compiled_ratio = d / c[0] if c else None
            line = f"{net:9s} {precision:9s} {batch:5d} {d:11.1f} {layout:>6s} {fmt(t and t[0], '.1f'):>12s} " \
                   f"{t[1] if t else '-':>10s} {fmt(ratio, '.2f'):>10s}"
            if any_compiled:
                line += f" {fmt(c and c[0], '.1f'):>14s} {fmt(compiled_ratio, '.2f'):>13s}"
            print(line)
            merged.append({"net": net, "precision": precision, "batch": batch, "demi_img_s": d,
                           "demi_layout": rows[key]["layout"], "torch_img_s": t[0] if t else None,
                           "torch_mode": t[1] if t else None, "ratio": ratio,
                           "compiled_img_s": c[0] if c else None, "compiled_mode": c[1] if c else None,
                           "compiled_ratio": compiled_ratio})
    if a.targets is not None:
        print_targets(merged, a.targets)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": versions, "threads": threads, "cpu_isa": isas, "rows": merged}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
