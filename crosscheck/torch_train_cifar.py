#!/usr/bin/env python3
"""Trains the PyTorch twin of a demi net (torch_nets.py) on CIFAR-10 with train_cifar's recipe, so
that demi's accuracy can be set beside PyTorch's: the same pixels (demi's decoded copy of the image
folders, or the binary batches), the same batches in the same order with the same crops and flips
(demi's random streams, reproduced), the same optimizer, parameter groups, schedule, loss and
evaluation; only the initial weights are PyTorch's own draws (from the same distributions). Each
choice names the demi file it mirrors. Recipes: cct (models cct4, cct7).

The twin of `train_cifar --model cct4 --epochs 20 --seed 0`, in scripts/lib/torch_venv.sh's venv:
  $XDG_CACHE_HOME/demi/torch-venv/bin/python crosscheck/torch_train_cifar.py --model cct4 --epochs 20
--data: CIFAR-10 as train_cifar reads it (default $DEMI_CIFAR10); --out DIR: where summary.json goes;
--limit N: train_cifar's --train-subset N --test-subset N.
"""
import argparse
import json
import math
import os
import queue
import re
import struct
import sys
import threading
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_nets  # noqa: E402

# ---- demi's random streams (datasets/random.h): splitmix64, the same on every platform ----------

M64, GOLDEN = (1 << 64) - 1, 0x9E3779B97F4A7C15


def splitmix64(x):
    z = (x + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def derive_seed(parent, tag):  # a seed for one purpose (an epoch, a batch): one stream per tag
    return splitmix64(parent ^ splitmix64((tag + 0x632BE59BD9B4E019) & M64))


class Rng:
    """detail::Rng: a splitmix64 stream; below(n) rejects the short last interval, as demi's."""

    def __init__(self, seed):
        self.state = seed & M64

    def next(self):  # the state moves on by GOLDEN, the output mixes it: splitmix64 of the old state
        out, self.state = splitmix64(self.state), (self.state + GOLDEN) & M64
        return out

    def below(self, n):
        threshold = (M64 + 1 - n) % n
        while (r := self.next()) < threshold:
            pass
        return r % n

    def shuffle(self, v):  # detail::shuffle: Fisher-Yates from the back
        for i in range(len(v), 1, -1):
            j = self.below(i)
            v[i - 1], v[j] = v[j], v[i - 1]
        return v


# ---- CIFAR-10 as demi loads it (datasets/cifar10.cpp, datasets/image_folder.cpp) ---------------


def hash_bytes(data, h):
    """image_folder.cpp hash_bytes: names the cache file and keys it to the tree."""
    def mix(h, w):
        h ^= (w * 0xFF51AFD7ED558CCD) & M64
        return ((((h << 29) | (h >> 35)) & M64) * 0xC4CEB9FE1A85EC53) & M64
    full = len(data) - len(data) % 8
    for (w,) in struct.iter_unpack("<Q", data[:full]):
        h = mix(h, w)
    h = mix(h, int.from_bytes(data[full:], "little") ^ ((len(data) << 56) & M64))
    h = ((h ^ (h >> 33)) * 0xFF51AFD7ED558CCD) & M64
    return h ^ (h >> 33)


def list_tree(root, split):
    """(classes, [(path, label)]) in image_folder.cpp list_tree's order: class folders sorted, then
    the files of each whose names end in .png, .jpg or .jpeg, sorted; names starting with '.' skipped."""
    top = os.path.join(root, split)
    classes = sorted(c for c in os.listdir(top) if c[0] != "." and os.path.isdir(os.path.join(top, c)))
    files = []
    for label, c in enumerate(classes):
        paths = (os.path.join(top, c, n) for n in sorted(os.listdir(os.path.join(top, c))) if n[0] != "." and
                 n.rsplit(".", 1)[-1].lower() in ("png", "jpg", "jpeg") and "." in n)
        files += [(f, label) for f in paths if os.path.isfile(f)]
    return classes, files


def read_demi_cache(root, split, classes, files):
    """The split as demi decoded it, from its cache file; None when there is none or the tree has
    changed since (the header's key hashes every file's name, size and mtime)."""
    canonical = os.path.realpath(root)
    leaf = re.sub(rb"[^A-Za-z0-9_-]", b"_", os.path.basename(canonical).encode()).decode()  # byte by byte
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "demi")
    path = os.path.join(cache, f"{leaf}-{hash_bytes(canonical.encode(), 0x2545F4914F6CDD1D):016x}-{split}.bin")
    if not os.path.isfile(path):
        return None
    key = [canonical.encode(), b"\0", split.encode()]
    for f, label in files:  # size, and mtime as libstdc++'s file clock counts it: ns from 2174-01-01
        st = os.stat(f)
        key += [b"\0", f"{classes[label]}/{os.path.basename(f)}".encode(),
                struct.pack("<Qq", st.st_size, st.st_mtime_ns - 6437664000 * 10**9)]
    n, key = len(files), hash_bytes(b"".join(key), 0x1D8E4E27C47D124F)
    header = b"DEMIIMGF" + struct.pack("<IIQQI", 1, 0 if split == "train" else 1, key, n, len(classes))
    header += b"".join(struct.pack("<I", len(c)) + c.encode() for c in classes)
    if os.path.getsize(path) != len(header) + n * (8 + 3072) + 8:
        return None
    with open(path, "rb") as f:
        if f.read(len(header)) != header:
            return None
        labels = np.frombuffer(f.read(8 * n), dtype="<i8").copy()
        images = np.frombuffer(f.read(3072 * n), dtype=np.uint8).reshape(n, 3, 32, 32).copy()
    return (images, labels) if np.array_equal(labels, [label for _, label in files]) else None


def load_split(root, split):
    """cifar10.cpp load_cifar10: binary batches (also under cifar-10-batches-bin/), else the image
    folder. uint8 [N, 3, 32, 32] images, int64 labels, and where the pixels came from."""
    names = ["test_batch.bin"] if split == "test" else [f"data_batch_{i}.bin" for i in range(1, 6)]
    for d in (root, os.path.join(root, "cifar-10-batches-bin")):
        if os.path.isfile(os.path.join(d, names[0])):
            rec = np.concatenate([np.fromfile(os.path.join(d, n), dtype=np.uint8).reshape(-1, 3073) for n in names])
            return rec[:, 1:].reshape(-1, 3, 32, 32).copy(), rec[:, 0].astype(np.int64), "binary batches"
    if not os.path.isdir(os.path.join(root, split)):
        sys.exit(f"torch_train_cifar: {root} holds neither CIFAR-10's binary batches nor {split}/<class>/ folders")
    cached = read_demi_cache(root, split, *list_tree(root, split))
    if cached is None:  # another decoder (Pillow's libjpeg) would put some pixels a level off stb_image's
        sys.exit(f"torch_train_cifar: train_cifar has no current decoded copy of {root}/{split}: run it once on the "
                 f"data first (train_cifar --data-dir {root} --epochs 0 writes it), so that both see the same pixels")
    return (*cached, "demi's decoded copy")


def balanced_subset(images, labels, n, seed):
    """dataset.cpp balanced_subset (train_cifar's --train-subset / --test-subset): a seeded shuffle
    fills each class's quota (the first n % classes classes take one more), in the data's order."""
    if n <= 0 or n >= len(labels):
        return images, labels
    classes = int(labels.max()) + 1
    quota = [n // classes + (c < n % classes) for c in range(classes)]
    chosen = []
    for i in Rng(derive_seed(seed, 0x5AB5E7)).shuffle(list(range(len(labels)))):
        if quota[labels[i]] > 0:
            quota[labels[i]] -= 1
            chosen.append(i)
    chosen.sort()
    return images[chosen], labels[chosen]


# ---- batches (datasets/data_loader.cpp, with the options train/training_data.cpp gives it) ------

ORDER_TAG, AUGMENT_TAG = 0x0BDE4, 0xA46E  # data_loader.cpp kOrderTag, kAugmentTag
PAD = 4  # AugmentOptions::crop_padding: the cct recipe keeps the defaults (recipe.cpp train_augmentation)
# kCifar10Normalization, applied through a float32 table computed as data_loader.cpp computes its own.
MEAN, STD = (np.array(v, dtype=np.float32) for v in ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]))
LUT = torch.from_numpy((np.arange(256, dtype=np.float32)[None, :] / np.float32(255) - MEAN[:, None]) / STD[:, None])


def normalise(u8):
    """uint8 [B, 3, 32, 32] -> float32 (pixel / 255 - mean) / std per channel."""
    return LUT[torch.arange(3).view(1, 3, 1, 1), u8.long()]


def augment(u8, draws):
    """make_batch's augmentation: a 32x32 crop of the image zero-padded by 4 (black before
    normalisation), mirrored after the crop: out[y, x] = image[y + dy, (flip ? 31 - x : x) + dx]."""
    dy, dx, flip = (torch.tensor(d) for d in zip(*draws))
    ar = torch.arange(32)
    rows = ar + dy[:, None] + PAD
    cols = torch.where(flip.bool()[:, None], 31 - ar, ar) + dx[:, None] + PAD
    b, c = torch.arange(len(u8)).view(-1, 1, 1, 1), torch.arange(3).view(1, 3, 1, 1)
    return F.pad(u8, (PAD,) * 4)[b, c, rows[:, None, :, None], cols[:, None, None, :]]


def train_batches(images, labels, seed, epoch, batch_size):
    """The epoch's batches as demi's training loader makes them: shuffled by (seed, epoch), full
    batches only (drop_last), each image's crop and flip drawn from (seed, epoch, batch)."""
    order = Rng(derive_seed(derive_seed(seed, ORDER_TAG), epoch)).shuffle(list(range(len(labels))))
    for b in range(len(labels) // batch_size):
        index = torch.tensor(order[b * batch_size:(b + 1) * batch_size])
        rng = Rng(derive_seed(derive_seed(derive_seed(seed, AUGMENT_TAG), epoch), b))
        draws = [(rng.below(2 * PAD + 1) - PAD, rng.below(2 * PAD + 1) - PAD, rng.next() >> 63) for _ in index]
        yield normalise(augment(images[index], draws)), labels[index]


def prefetch(batches, depth=4):
    """The batches made on a thread, `depth` ahead (DataLoader's prefetch_batches), as demi's loader
    makes them beside the training loop; an error there is raised here."""
    ready = queue.Queue(depth)

    def work():
        try:
            for batch in batches:
                ready.put(batch)
        except Exception as e:  # noqa: BLE001 - raised in the training loop
            ready.put(e)
        ready.put(None)
    threading.Thread(target=work, daemon=True).start()
    while (batch := ready.get()) is not None:
        if isinstance(batch, Exception):
            raise batch
        yield batch


# ---- recipes (train/recipe.cpp, train/components.cpp, framework/optim/) -----------------------


def cosine_with_warmup(steps_per_epoch, epochs):
    """--schedule cosine: components.cpp builds CosineWithWarmup with a warm-up of one epoch or a
    tenth of the steps, whichever is shorter, down to factor 0 at the last step; lr_scheduler.cpp's
    factor, a step per iteration."""
    total = max(2, steps_per_epoch * epochs)  # components.cpp step_counts
    warmup = min(steps_per_epoch, total // 10)

    def factor(it):
        if it < warmup:
            return (it + 1) / (warmup + 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (it - warmup) / (total - warmup))))
    return factor


def cct_recipe(model, steps_per_epoch, epochs):
    """recipe.cpp apply_cct_defaults: AdamW, lr 1e-3, decoupled weight decay 0.06, cosine schedule,
    label smoothing 0.1; betas (0.9, 0.999) and eps 1e-8 are optim/adamw.h's defaults (PyTorch's).
    cct_parameter_groups: no weight decay on parameters of fewer than 2 dims (biases, LayerNorms)
    nor on the positional embedding. Returns (optimizer, schedule, label smoothing)."""
    decay, no_decay = [], []
    for p in model.parameters():
        (no_decay if p.dim() < 2 or p is model.positional_emb else decay).append(p)
    groups = [{"params": decay, "weight_decay": 0.06}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, cosine_with_warmup(steps_per_epoch, epochs)), 0.1


RECIPES = {"cct": (("cct4", "cct7"), cct_recipe)}  # recipe: (the models it trains, its factory)

# ---- training and evaluation (framework/training/train_step.cpp, train/loop.cpp, evaluate.cpp) --


def autocast(precision):  # fp32 runs outside autocast, as demi's TrainStep and evaluate do
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}
    return torch.autocast("cpu", dtype=half.get(precision, torch.bfloat16), enabled=precision in half)


def train_step(model, x, y, opt, scaler, smoothing, precision):
    """TrainStep::run: forward and mean loss under autocast, backward outside it; fp16 through the
    GradScaler, whose options are PyTorch's defaults in demi too. Without a scaler a non-finite
    loss skips the update, as demi skips it. Returns (loss, finite, stepped)."""
    opt.zero_grad(set_to_none=True)
    with autocast(precision):
        loss = F.cross_entropy(model(x), y, label_smoothing=smoothing)
    finite = bool(torch.isfinite(loss))
    if scaler is None:
        loss.backward()
        if finite:
            opt.step()
        return loss.item(), finite, finite
    scale = scaler.get_scale()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item(), finite, scaler.get_scale() >= scale  # a skipped step backs the scale off


def tta_logits(model, x, plain, level):
    """evaluate.cpp tta_logits (airbench's): 1 averages in the mirror image; 2 also the images moved
    one pixel down-right and up-left (data::translate, reflected borders), each with its mirror."""
    def with_mirror(v):
        return (model(v).float() + model(v.flip(3)).float()) * 0.5
    mirrored = (plain + model(x.flip(3)).float()) * 0.5
    if level == 1:
        return mirrored
    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")  # translate by d: out[y, x] = in[reflect(y - d), ...]
    return mirrored * 0.5 + (with_mirror(padded[:, :, :32, :32]) + with_mirror(padded[:, :, 2:, 2:])) * 0.25


@torch.no_grad()
def evaluate(model, images, labels, precision, tta):
    """(plain, with test-time augmentation) test accuracy, the same when tta is 0: batches of 500
    in order, not augmented, eval mode, under the run's autocast, the first largest logit wins."""
    model.eval()
    right = right_tta = 0
    with autocast(precision):
        for i in range(0, len(labels), 500):
            x, y = normalise(images[i:i + 500]), labels[i:i + 500]
            plain = model(x).float()
            right += (plain.argmax(1) == y).sum().item()
            right_tta += (tta_logits(model, x, plain, tta).argmax(1) == y).sum().item() if tta else 0
    model.train()
    return right / max(1, len(labels)), (right_tta if tta else right) / max(1, len(labels))


def train_epoch(model, batches, opt, schedule, scaler, smoothing, precision, counts):
    """One epoch's steps (loop.cpp train_epoch); the mean of its finite losses. After 10 non-finite
    losses in a row the run stops (config.h max_nonfinite_steps)."""
    losses = []
    for x, y in batches:
        loss, finite, stepped = train_step(model, x, y, opt, scaler, smoothing, precision)
        schedule.step()  # every iteration, a skipped one too (TrainStep::run)
        counts["steps_skipped"] += not stepped
        counts["nonfinite_loss_steps"] += not finite
        counts["in_a_row"] = 0 if finite else counts["in_a_row"] + 1
        if counts["in_a_row"] >= 10:
            sys.exit("torch_train_cifar: 10 steps in a row had a non-finite loss; stopping")
        losses += [loss] if finite else []
    return sum(losses) / max(1, len(losses))


def train(args, train_x, train_y, test_x, test_y):
    """loop.cpp FitLoop: each epoch trains, then scores the test set (the last epoch with --tta)."""
    torch.manual_seed(args.seed)  # components.cpp make_model seeds, then builds the model
    model = torch_nets.make(args.model)
    steps = len(train_y) // args.batch_size
    opt, schedule, smoothing = RECIPES[args.recipe][1](model, steps, args.epochs)
    scaler = torch.amp.GradScaler("cpu") if args.precision == "fp16" else None
    s = {"steps_skipped": 0, "nonfinite_loss_steps": 0, "in_a_row": 0, "best_test_accuracy": 0.0, "history": []}
    plain, augmented, start = 0.0, 0.0, time.perf_counter()
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        batches = prefetch(train_batches(train_x, train_y, args.seed, epoch, args.batch_size))
        loss = train_epoch(model, batches, opt, schedule, scaler, smoothing, args.precision, s)
        images_per_s = steps * args.batch_size / (time.perf_counter() - t0)
        tta = args.tta if epoch + 1 == args.epochs else 0
        plain, augmented = evaluate(model, test_x, test_y, args.precision, tta)
        s["best_test_accuracy"] = max(s["best_test_accuracy"], plain, augmented)
        s["history"].append({"epoch": epoch + 1, "loss": loss, "test_accuracy": plain, "lr": schedule.get_last_lr()[0],
                             "images_per_s": images_per_s, "epoch_s": time.perf_counter() - t0})
        with_tta = f", {100 * augmented:.2f}% with test-time augmentation {tta}" if tta else ""
        print(f"epoch {epoch + 1}/{args.epochs}: loss {loss:.4f}, test accuracy {100 * plain:.2f}%{with_tta}, "
              f"{images_per_s:.0f} img/s, elapsed {time.perf_counter() - start:.1f} s", flush=True)
    s["time_s"] = time.perf_counter() - start
    s["images_per_s"] = args.epochs * steps * args.batch_size / max(s["time_s"], 1e-9)
    s["final_loss_scale"] = scaler.get_scale() if scaler else 1.0
    del s["in_a_row"]
    return {"final_test_accuracy": augmented, "final_test_accuracy_without_tta": plain, **s}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="cct4", choices=[m for models, _ in RECIPES.values() for m in models])
    p.add_argument("--recipe", default="cct", choices=list(RECIPES))
    p.add_argument("--epochs", type=int, default=15, help="default 15, train_cifar's")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tta", type=int, default=0, choices=[0, 1, 2], help="test-time augmentation of the last "
                   "evaluation: 0 none (the cct recipe's), 1 mirror, 2 mirror and translations")
    p.add_argument("--threads", type=int, default=0, help="0: all cores, as demi's OpenMP default")
    p.add_argument("--data", "--data-dir", dest="data", default=os.environ.get("DEMI_CIFAR10") or None)
    p.add_argument("--out", default="runs/torch-latest", help="the directory summary.json goes to")
    p.add_argument("--limit", type=int, default=0, help="train_cifar's --train-subset N --test-subset N: "
                   "class-balanced subsets of N images (0: all)")
    args = p.parse_args()
    if args.model not in RECIPES[args.recipe][0]:
        p.error(f"--recipe {args.recipe} trains {' or '.join(RECIPES[args.recipe][0])}, not {args.model}")
    if not args.data:
        p.error("no data: pass --data DIR or set DEMI_CIFAR10 (CIFAR-10's image folders or binary batches)")
    return args


def main():
    args = parse_args()
    wall = time.perf_counter()
    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    # A step the GradScaler skips still steps the schedule, as in demi; PyTorch would warn.
    warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()` before")
    (train_x, train_y, pixels), (test_x, test_y, _) = (load_split(args.data, split) for split in ("train", "test"))
    # training_data.cpp: the training subset is seeded by --seed, the test subset by --seed + 1.
    train_x, train_y = map(torch.from_numpy, balanced_subset(train_x, train_y, args.limit, args.seed))
    test_x, test_y = map(torch.from_numpy, balanced_subset(test_x, test_y, args.limit, args.seed + 1))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads: {args.model}, recipe {args.recipe}, "
          f"{args.precision}, seed {args.seed}; {len(train_y)} train / {len(test_y)} test images from {args.data} "
          f"({pixels}), loaded in {time.perf_counter() - wall:.1f} s", flush=True)
    result = train(args, train_x, train_y, test_x, test_y)
    summary = {**{k: getattr(args, k) for k in ("model", "recipe", "precision", "epochs", "batch_size", "seed", "tta")},
               "train_images": len(train_y), "test_images": len(test_y), "pixels": pixels, "torch": torch.__version__,
               "threads": torch.get_num_threads(), **result, "wall_s": time.perf_counter() - wall}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        f.write(json.dumps(summary, indent=2) + "\n")
    without = f" (test-time augmentation {args.tta}; without: {100 * result['final_test_accuracy_without_tta']:.2f}%)"
    print(f"final: {args.model} in PyTorch {torch.__version__}, {args.precision}, {args.epochs} epochs, seed "
          f"{args.seed}: test accuracy {100 * result['final_test_accuracy']:.2f}%{without if args.tta else ''}, "
          f"{summary['wall_s']:.0f} s in all; {os.path.join(args.out, 'summary.json')}", flush=True)


if __name__ == "__main__":
    main()
