#!/usr/bin/env python3
"""The table of scripts/bench-precisions: bench_train_step's JSON files named
<net>-<batch>-<precision>-round<r>.json, one row per net, batch and precision with its img/s in
each round and their median, and for every precision but fp32 its ratio to the same round's fp32.

Usage: precision_rounds.py [--json summary.json] FILE...
"""
import argparse
import json
import re
import statistics
import sys

NAME = re.compile(r"round(\d+)\.json$")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--json")
    args = ap.parse_args()
    img_s = {}  # (net, batch, precision) -> {round: img/s}
    for path in args.files:
        m = NAME.search(path)
        try:
            with open(path) as f:
                run = json.load(f)
        except (OSError, ValueError) as e:
            print(f"precision_rounds: skipping {path}: {e}", file=sys.stderr)
            continue
        for r in run.get("rows", []):
            if "img_s" in r and m:
                img_s.setdefault((r["net"], r["batch"], r["precision"]), {})[int(m.group(1))] = r["img_s"]
    if not img_s:
        print("precision_rounds: no results", file=sys.stderr)
        return 1
    print(f"{'net':9}{'batch':>6} {'prec':6}{'median img/s':>13}  {'x fp32 median':>13}   img/s per round (x fp32)")
    summary = []
    for key in sorted(img_s, key=lambda k: (k[0], k[1], k[2] != "fp32", k[2])):
        net, batch, prec = key
        runs = img_s[key]
        base = img_s.get((net, batch, "fp32"), {})
        ratios = {r: v / base[r] for r, v in runs.items() if r in base} if prec != "fp32" else {}
        cells = " ".join(f"{v:.0f}" + (f" ({ratios[r]:.2f})" if r in ratios else "") for r, v in sorted(runs.items()))
        ratio = statistics.median(ratios.values()) if ratios else None
        shown = f"{ratio:.2f}" if ratio is not None else ""
        print(f"{net:9}{batch:6} {prec:6}{statistics.median(runs.values()):13.1f}  {shown:>13}   {cells}")
        summary.append({"net": net, "batch": batch, "precision": prec, "img_s": runs,
                        "median_img_s": statistics.median(runs.values()), "ratios_to_fp32": ratios,
                        "median_ratio_to_fp32": ratio})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
