#!/usr/bin/env python3
"""Holds crosscheck_ops' results against PyTorch.

For every case in the file crosscheck_ops wrote, runs the same op in PyTorch on the same input
bits, once in the case's dtype (the result a PyTorch user would get) and once in float64 (the
reference), and compares demi's outputs and input gradients with both:

  differs        demi's error against float64 is above 1e-2 and 10x PyTorch's: a different meaning
  less accurate  above 4x PyTorch's error (and above the dtype's unit roundoff)
  dtype          demi's result has another dtype than PyTorch's
  non-finite     inf / NaN where PyTorch has a number, or the other way round, or a different sign
  torch off      PyTorch's inf / NaN in this dtype differ from its own float64 result, demi's do not
  zero sign      +0 where PyTorch has -0 or the other way round
  intended       a difference docs/pytorch.md lists as intended
  mismatch       integer results (argmax, comparisons) that are not equal
  raised         one side raised an error and the other did not

Errors are relative per element, against float64, with a floor of 1e-3 of the tensor's largest
magnitude so that values near zero do not dominate; a module's or a whole net's tensors norm-wise.
Prints the rows that are not ok, but for
intended differences and the signs of zero gradients (all with --all), and a count per verdict;
exits 1 when any case differs, raised or mismatched.

Usage: compare.py RESULTS.safetensors [--all] [--mode fp32,bf16,...]
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

import torch_nets

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64, "U8": torch.uint8, "BOOL": torch.bool}
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float64: 2.0**-53}
AUTOCAST = {"autocast_bf16": torch.bfloat16, "autocast_fp16": torch.float16,
            "models_autocast_bf16": torch.bfloat16, "models_autocast_fp16": torch.float16,
            "autocast_bf16_half_inputs": torch.bfloat16, "autocast_fp16_half_inputs": torch.float16}
# (op, verdict) -> why: docs/pytorch.md, "Intended differences".
INTENDED = {("cross_entropy", "dtype"): "losses are fp32 (docs/pytorch.md)",
            ("clip_grad_norm", "non-finite"): "a non-finite norm leaves the gradients (docs/pytorch.md)"}
# Half inputs under autocast: demi runs PyTorch's CUDA fp32 list on the CPU too.
CUDA_FP32_LIST = {"exp", "log", "pow", "sum", "mean", "softmax", "log_softmax", "layer_norm"}


def intended(mode, op, params, verdict):
    """Why a verdict is an intended difference, or None."""
    # A post-norm encoder layer's output is layer_norm's.
    ends_in_layer_norm = op == "transformer_encoder_layer" and not params["norm_first"]
    if mode.endswith("_half_inputs") and (op in CUDA_FP32_LIST or ends_in_layer_norm) and verdict == "dtype":
        return "autocast runs it in fp32, PyTorch's CUDA list, on the CPU too (docs/pytorch.md)"
    return INTENDED.get((op, verdict))


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        raw = bytearray(body[begin:end])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors, meta


def dims_arg(dims):
    return tuple(dims) if dims else None


def reduce(fn, x, p):
    dims = dims_arg(p["dims"])
    return fn(x) if dims is None and not p["keepdim"] else fn(x, dim=dims, keepdim=p["keepdim"])


def stride_arg(p):
    return p["stride"] or None


def batch_norm(x, p):
    weight = x[3] if len(x) > 3 else None
    bias = x[4] if len(x) > 4 else None
    y = F.batch_norm(x[0], x[1], x[2], weight, bias, p["training"], p["momentum"], p["eps"])
    act = p.get("activation", "none")
    return [F.relu(y) if act == "relu" else F.gelu(y) if act == "gelu" else y, x[1], x[2]]


def trajectory(x, p, make):
    """The parameter after each step, the gradients given (crosscheck_ops.cpp's trajectory)."""
    w = torch.nn.Parameter(x[0].clone())
    opt = make([w])
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=p["lr"], total_steps=len(x) - 1) if p["one_cycle"] else None
    out = []
    for g in x[1:]:
        w.grad = g.clone()
        opt.step()
        if schedule:
            schedule.step()
        out.append(w.detach().clone())
    return out


def sgd(x, p):
    return trajectory(x, p, lambda w: torch.optim.SGD(w, lr=p["lr"], momentum=p["momentum"], dampening=p["dampening"],
                                                      weight_decay=p["weight_decay"], nesterov=p["nesterov"]))


def adamw(x, p):
    return trajectory(x, p, lambda w: torch.optim.AdamW(w, lr=p["lr"], weight_decay=p["weight_decay"]))


def muon(x, p):
    """torch.optim.Muon, its Newton-Schulz iteration run in the parameter's dtype instead of bf16.

    PyTorch orthogonalises a bf16 copy of the update; demi (optim::Muon) the fp32 one, which moves
    the parameters 1-4% apart in six steps. Everything else (the EMA momentum, Nesterov, the
    sqrt(rows / cols) lr, decoupled decay, the quintic's coefficients) is compared as PyTorch has it.
    """
    import torch.optim._muon as muon_module
    stock = muon_module._zeropower_via_newtonschulz

    def in_own_dtype(grad, coefficients, steps, eps):
        a, b, c = coefficients
        x = grad.clone()
        if grad.size(0) > grad.size(1):
            x = x.T
        x.div_(x.norm().clamp(min=eps))
        for _ in range(steps):
            gram = x @ x.T
            x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
        return x.T if grad.size(0) > grad.size(1) else x

    muon_module._zeropower_via_newtonschulz = in_own_dtype
    try:
        return trajectory(x, p, lambda w: torch.optim.Muon(w, lr=p["lr"]))
    finally:
        muon_module._zeropower_via_newtonschulz = stock


def clip_grad_norm(x, p):
    a, b = torch.nn.Parameter(torch.zeros_like(x[0])), torch.nn.Parameter(torch.zeros_like(x[1]))
    a.grad, b.grad = x[0].clone(), x[1].clone()
    norm = torch.nn.utils.clip_grad_norm_([a, b], p["max_norm"])
    return [norm, a.grad, b.grad]


def grad_scaler(x, p):
    """crosscheck_ops.cpp's grad_scaler_fp16: w after each step, then the scale after each."""
    w = torch.nn.Parameter(x[0].clone())
    opt = torch.optim.SGD([w], lr=p["lr"])
    scaler = torch.amp.GradScaler("cpu", growth_interval=p["growth_interval"])
    ws, scales = [], []
    for xk, m in zip(x[1:], p["mults"]):
        opt.zero_grad()
        loss = (w.half() * xk.half()).sum().float() * m
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        ws.append(w.detach().clone())
        scales.append(torch.tensor(scaler.get_scale(), dtype=torch.float32))
    return ws + scales


def model(x, p):
    """crosscheck_ops.cpp's run_model_case in PyTorch: the net's twin (torch_nets.py) given demi's
    state_dict.

    The state_dict's entries go to the twin's in order (same shapes), so that the numbers are
    compared even where a name differs; model_names reports where the names differ. Returns the
    loss, the logits, the buffers after the forward and the logits in eval mode."""
    import torch.func
    net = torch_nets.make(p["model"])
    names = list(net.state_dict().keys())
    if len(names) != len(p["names"]):
        raise ValueError(f"{len(p['names'])} state_dict entries in demi, {len(names)} in PyTorch")
    state = dict(zip(names, x[2:]))
    buffers = [n for n, _ in net.named_buffers()]
    net.train()
    logits = torch.func.functional_call(net, state, (x[0],))
    # demi's loss is fp32 for half logits too (docs/pytorch.md, "Intended differences"): the same
    # as PyTorch's on the logits widened.
    loss = F.cross_entropy(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, x[1])
    after = [state[n].detach().clone() for n in buffers]
    net.eval()
    with torch.no_grad():
        eval_logits = torch.func.functional_call(net, state, (x[0].detach(),))
    return [loss, logits, *after, eval_logits]


def model_names(demi_names, net):
    """Where demi's state_dict names differ from the twin's (None when they agree)."""
    names = list(torch_nets.make(net).state_dict().keys())
    diff = [(d, t) for d, t in zip(demi_names, names) if d != t]
    return None if not diff else f"{len(diff)} of {len(names)} names differ, e.g. demi {diff[0][0]} torch {diff[0][1]}"


def dropout(x, p):
    """A second input is demi's keep mask (crosscheck_ops.cpp, Draw::DropoutKeep): PyTorch's RNG would
    draw another, so PyTorch applies demi's, as its dropout applies its own: x * mask / (1 - p)."""
    if len(x) > 1:
        return [x[0] * x[1] * (1.0 / (1.0 - p["p"]))]
    return [F.dropout(x[0], p["p"], p["training"])]


def layer_norm(x, p):
    """Inputs: x, then weight and bias if the case has them."""
    weight = x[1] if len(x) > 1 else None
    bias = x[2] if len(x) > 2 else None
    return [F.layer_norm(x[0], p["normalized_shape"], weight, bias, p["eps"])]


def global_max_pool2d(x):
    return F.max_pool2d(x, kernel_size=x.shape[-2:])  # nn.AdaptiveMaxPool2d(1)'s choice of index


def scaled_dot_product_attention(x, p):
    """crosscheck_ops.cpp's sdpa cases: the bool mask arrives as 0 / 1 integers."""
    mask = x[3].bool() if p["mask"] == "bool" else x[3] if p["mask"] == "additive" else None
    return [F.scaled_dot_product_attention(x[0], x[1], x[2], attn_mask=mask, is_causal=p["causal"])]


def module_inputs(x, p):
    """A module case's inputs (module_cases.cpp): its data and masks, then the module's parameters,
    named by p["names"] (demi's state_dict names, which must be torch's)."""
    n = len(p["names"])
    return list(x[:-n]), dict(zip(p["names"], x[-n:]))


def attention_masks(data, p, length):
    """Takes key_padding_mask and attn_mask off data (module_cases.cpp's order) in torch's form: bool
    where demi's uint8 is 1. is_causal alone gets the causal mask beside it, which torch requires as
    the hint's companion (and drops again unless a key_padding_mask needs it merged)."""
    key_padding = data.pop(0).bool() if p["key_padding_mask"] else None
    attn = data.pop(0) if p["attn_mask"] != "none" else None
    if p["attn_mask"] == "bool":
        attn = attn.bool()
    if p["is_causal"] and attn is None:
        attn = torch.ones(length, length, dtype=torch.bool).triu(1)
    return key_padding, attn


def call_module(module, state, args, kwargs):
    """module's forward with state as its parameters; a bool key_padding_mask beside an additive
    attn_mask is merged as two additive masks, as demi does (torch warns that the mix is deprecated)."""
    import torch.func
    import warnings
    if set(state) != set(module.state_dict()):
        raise ValueError(f"parameters demi {sorted(state)} torch {sorted(module.state_dict())}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Support for mismatched")
        return torch.func.functional_call(module, state, args, kwargs, strict=True)


def multihead_attention(x, p):
    data, state = module_inputs(x, p)
    q = data.pop(0)
    k, v = (q, q) if p["self_attention"] else (data.pop(0), data.pop(0))
    key_padding, attn = attention_masks(data, p, q.shape[1 if p["batch_first"] else 0])
    mha = torch.nn.MultiheadAttention(p["embed_dim"], p["num_heads"], bias=p["bias"], batch_first=p["batch_first"],
                                      dtype=state["in_proj_weight"].dtype)
    kwargs = {"key_padding_mask": key_padding, "attn_mask": attn, "need_weights": False, "is_causal": p["is_causal"]}
    return [call_module(mha, state, (q, k, v), kwargs)[0]]


def transformer_encoder_layer(x, p):
    data, state = module_inputs(x, p)
    src = data.pop(0)
    key_padding, attn = attention_masks(data, p, src.shape[1 if p["batch_first"] else 0])
    layer = torch.nn.TransformerEncoderLayer(p["d_model"], p["nhead"], p["dim_feedforward"], dropout=0.0,
                                             activation=p["activation"], layer_norm_eps=p["layer_norm_eps"],
                                             batch_first=p["batch_first"], norm_first=p["norm_first"],
                                             dtype=state["self_attn.in_proj_weight"].dtype)
    kwargs = {"src_mask": attn, "src_key_padding_mask": key_padding, "is_causal": p["is_causal"]}
    return [call_module(layer, state, (src,), kwargs)]


# op name -> f(inputs, params) -> list of outputs (the first differentiated)
OPS = {
    "add": lambda x, p: [x[0] + x[1]],
    "sub": lambda x, p: [x[0] - x[1]],
    "mul": lambda x, p: [x[0] * x[1]],
    "div": lambda x, p: [x[0] / x[1]],
    "affine": lambda x, p: [x[0] * p["alpha"] + p["beta"]],
    "rsub_scalar": lambda x, p: [p["value"] - x[0]],
    "rdiv_scalar": lambda x, p: [p["value"] / x[0]],
    "div_scalar": lambda x, p: [x[0] / p["value"]],
    "neg": lambda x, p: [-x[0]],
    "exp": lambda x, p: [torch.exp(x[0])],
    "log": lambda x, p: [torch.log(x[0])],
    "sqrt": lambda x, p: [torch.sqrt(x[0])],
    "pow": lambda x, p: [torch.pow(x[0], p["exponent"])],
    "relu": lambda x, p: [F.relu(x[0])],
    "gelu": lambda x, p: [F.gelu(x[0])],
    "clamp": lambda x, p: [torch.clamp(x[0], p.get("min"), p.get("max"))],
    "eq": lambda x, p: [x[0] == x[1]],
    "ne": lambda x, p: [x[0] != x[1]],
    "lt": lambda x, p: [x[0] < x[1]],
    "le": lambda x, p: [x[0] <= x[1]],
    "gt": lambda x, p: [x[0] > x[1]],
    "ge": lambda x, p: [x[0] >= x[1]],
    "lt_scalar": lambda x, p: [x[0] < p["value"]],
    "sum": lambda x, p: [reduce(torch.sum, x[0], p)],
    "mean": lambda x, p: [reduce(torch.mean, x[0], p)],
    "argmax": lambda x, p: [torch.argmax(x[0], dim=p["dim"], keepdim=p["keepdim"])],
    "reshape": lambda x, p: [x[0].reshape(p["shape"])],
    "transpose": lambda x, p: [x[0].transpose(p["dim0"], p["dim1"])],
    "contiguous": lambda x, p: [x[0].contiguous(memory_format=getattr(torch, p["memory_format"])) * 2.0],
    "select": lambda x, p: [x[0].select(p["dim"], p["index"])],
    "cat": lambda x, p: [torch.cat(x, dim=p["dim"])],
    "matmul": lambda x, p: [x[0] @ x[1]],
    "linear": lambda x, p: [F.linear(*x)],
    "conv2d": lambda x, p: [F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, p["stride"], p["padding"])],
    "max_pool2d": lambda x, p: [F.max_pool2d(x[0], p["kernel_size"], stride_arg(p), p["padding"])],
    "avg_pool2d": lambda x, p: [F.avg_pool2d(x[0], p["kernel_size"], stride_arg(p), p["padding"])],
    "global_avg_pool2d": lambda x, p: [F.adaptive_avg_pool2d(x[0], 1)],
    "global_max_pool2d": lambda x, p: [global_max_pool2d(x[0])],
    "batch_norm": batch_norm,
    "softmax": lambda x, p: [F.softmax(x[0], dim=p["dim"])],
    "log_softmax": lambda x, p: [F.log_softmax(x[0], dim=p["dim"])],
    "cross_entropy": lambda x, p: [F.cross_entropy(x[0], x[1], label_smoothing=p["label_smoothing"])],
    "sgd": sgd,
    "adamw": adamw,
    "clip_grad_norm": clip_grad_norm,
    "muon": muon,
    "grad_scaler": grad_scaler,
    "model": model,
    "dropout": dropout,
    "embedding": lambda x, p: [F.embedding(x[1], x[0], padding_idx=p["padding_idx"])],
    "abs": lambda x, p: [torch.abs(x[0])],
    "max": lambda x, p: [torch.max(x[0])],
    "min": lambda x, p: [torch.min(x[0])],
    "amax": lambda x, p: [torch.amax(x[0], dim=p["dims"], keepdim=p["keepdim"])],
    "amin": lambda x, p: [torch.amin(x[0], dim=p["dims"], keepdim=p["keepdim"])],
    "max_dim": lambda x, p: list(torch.max(x[0], dim=p["dim"], keepdim=p["keepdim"])),
    "min_dim": lambda x, p: list(torch.min(x[0], dim=p["dim"], keepdim=p["keepdim"])),
    "argmin": lambda x, p: [torch.argmin(x[0], dim=p["dim"], keepdim=p["keepdim"])],
    "where": lambda x, p: [torch.where(x[0] > 0.5, x[1], x[2])],
    "where_scalar": lambda x, p: [torch.where(x[0] > 0.5, x[1], p["value"])],
    "masked_fill": lambda x, p: [x[0].masked_fill(x[1] > 0.5, float(p["value"]))],
    "permute": lambda x, p: [x[0].permute(p["dims"])],
    "unsqueeze": lambda x, p: [x[0].unsqueeze(p["dim"])],
    "squeeze": lambda x, p: [x[0].squeeze() if p["dim"] is None else x[0].squeeze(p["dim"])],
    "expand": lambda x, p: [x[0].expand(p["shape"])],
    "scaled_dot_product_attention": scaled_dot_product_attention,
    "layer_norm": layer_norm,
    "multihead_attention": multihead_attention,
    "transformer_encoder_layer": transformer_encoder_layer,
}
# The ops of several layers: their tensors are judged norm-wise (main).
NORMWISE_OPS = {"model", "multihead_attention", "transformer_encoder_layer"}
# Cases whose inputs are scaled before the op (crosscheck_ops.cpp does the same).
PRE_SCALE = {"softmax_large_logits": 1000.0, "cross_entropy_confident": 100.0, "sdpa_large_logits": 30.0}


def run_torch(case, inputs, gy, dtype64, autocast_dtype):
    """Outputs and input gradients of case in PyTorch; dtype64 runs it in float64 (no autocast)."""
    grads_wanted = [i["grad"] for i in case["inputs"]]
    x = []
    for t, want in zip(inputs, grads_wanted):
        t = t.clone()
        if dtype64 and t.is_floating_point():
            t = t.double()
        x.append(t.requires_grad_(want))
    name = case["key"].split("/", 1)[1]
    args = list(x)
    if name in PRE_SCALE:
        args[0] = args[0] * PRE_SCALE[name]
    if (case["params"] or {}).get("channels_last"):  # demi's case converts its 4-D inputs alike
        args = [a.contiguous(memory_format=torch.channels_last) if a.dim() == 4 else a for a in args]
    if autocast_dtype is not None and not dtype64:
        with torch.autocast("cpu", dtype=autocast_dtype):
            y = OPS[case["op"]](args, case["params"])
    else:
        y = OPS[case["op"]](args, case["params"])
    grads = {}
    wanted = [i for i, want in enumerate(grads_wanted) if want]
    if gy is not None and wanted:
        g = gy.double() if dtype64 else gy
        out = torch.autograd.grad(y[0], [x[i] for i in wanted], g.to(y[0].dtype), allow_unused=True)
        grads = {i: o for i, o in zip(wanted, out) if o is not None}
    return [t.detach() for t in y], grads


def relative_errors(a, ref):
    """Per-element |a - ref| / max(|ref|, 1e-3 max|ref|) over the positions where both are finite."""
    a, ref = a.double(), ref.double()
    both = torch.isfinite(a) & torch.isfinite(ref)
    if not both.any():
        return 0.0
    r = ref[both]
    floor = max(r.abs().max().item() * 1e-3, 1e-30)
    return ((a[both] - r).abs() / r.abs().clamp_min(floor)).max().item()


def nonfinite_mismatches(a, b):
    a, b = a.double(), b.double()
    nan = torch.isnan(a) != torch.isnan(b)
    inf = (torch.isinf(a) != torch.isinf(b)) | (torch.isinf(a) & torch.isinf(b) & (torch.sign(a) != torch.sign(b)))
    return int((nan | inf).sum().item())


def normwise_error(a, ref):
    """||a - ref|| / ||ref|| over the positions where both are finite (a whole net's tensors)."""
    a, ref = a.double(), ref.double()
    both = torch.isfinite(a) & torch.isfinite(ref)
    norm = ref[both].norm().item()
    return (a[both] - ref[both]).norm().item() / norm if norm > 0 else (a[both] - ref[both]).norm().item()


def judge(d, t, r, dtype, errors=relative_errors):
    """(verdict, demi error, torch error, note) for demi's tensor d against torch's t and float64's r."""
    if tuple(d.shape) != tuple(t.shape):
        return "differs", math.nan, math.nan, f"shape demi {list(d.shape)} torch {list(t.shape)}"
    notes = []
    verdict = "ok"
    torch_dtype = t.dtype
    if torch_dtype == torch.bool:
        torch_dtype = torch.uint8
    if d.dtype != torch_dtype:
        verdict, notes = "dtype", [f"dtype demi {d.dtype} torch {t.dtype}".replace("torch.", "")]
    if not d.is_floating_point():
        bad = int((d.to(torch.int64) != t.to(torch.int64)).sum().item())
        if bad:
            return "mismatch", math.nan, math.nan, f"{bad} of {d.numel()} differ"
        return verdict, 0.0, 0.0, "; ".join(notes)
    mism = nonfinite_mismatches(d, t)
    if mism:
        ref_side = nonfinite_mismatches(d, r)
        notes.append(f"{mism} of {d.numel()} inf/NaN differ from torch ({ref_side} from float64)")
        if verdict == "ok":
            verdict = "torch off" if ref_side == 0 else "non-finite"
    zeros = (d.double() == 0) & (t.double() == 0) & (torch.signbit(d.double()) != torch.signbit(t.double()))
    if zeros.any():
        notes.append(f"{int(zeros.sum())} zeros of the other sign")
        if verdict == "ok":
            verdict = "zero sign"
    ed, et = errors(d, r), errors(t, r)
    u = UNIT_ROUNDOFF.get(dtype, 2.0**-24)
    if ed > 1e-2 and ed > 10 * max(et, u):
        verdict = "differs"
    elif ed > 4 * max(et, u) and verdict == "ok":
        verdict = "less accurate"
    return verdict, ed, et, "; ".join(notes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--all", action="store_true", help="print every row, not only those that are not ok")
    parser.add_argument("--mode", default="", help="comma-separated modes to check (default all)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    tensors, meta = load_safetensors(args.results)
    cases = json.loads(meta["cases"])
    modes = set(args.mode.split(",")) if args.mode else None

    rows, counts = [], {}
    for case in cases:
        key, mode = case["key"], case["mode"]
        if modes and mode not in modes:
            continue
        inputs = [tensors[f"{key}/in{i}"] for i in range(len(case["inputs"]))]
        gy = tensors.get(f"{key}/gy")
        autocast_dtype = AUTOCAST.get(mode)
        dtype = autocast_dtype or next((t.dtype for t in inputs if t.is_floating_point()), torch.float32)
        try:
            ty, tg = run_torch(case, inputs, gy, False, autocast_dtype)
            ry, rg = run_torch(case, inputs, gy, True, None)
            torch_error = None
        except Exception as e:  # noqa: BLE001 - an error is a result to compare
            torch_error = str(e).splitlines()[0]
        if "error" in case or torch_error:
            if "error" in case and torch_error:
                verdict, note = "ok", "both raised"
            elif "error" in case:
                verdict, note = "raised", "demi: " + case["error"].splitlines()[0]
            else:
                verdict, note = "raised", "torch: " + torch_error
            rows.append((key, "-", verdict, math.nan, math.nan, note))
            counts[verdict] = counts.get(verdict, 0) + 1
            continue
        compared = [(f"out{i}", tensors[f"{key}/out{i}"], ty[i], ry[i]) for i in range(case["outputs"])]
        for i, info in enumerate(case["inputs"]):
            if not info["grad"]:
                continue
            d = tensors.get(f"{key}/grad{i}")
            t, r = tg.get(i), rg.get(i)
            if d is None or t is None:
                if (d is None) != (t is None):
                    rows.append((key, f"grad{i}", "differs", math.nan, math.nan,
                                 "demi has no gradient" if d is None else "torch has no gradient"))
                    counts["differs"] = counts.get("differs", 0) + 1
                continue
            compared.append((f"grad{i}", d, t, r))
        # A whole net's tensors, and a module's, are judged norm-wise: per element, the rounding of
        # many layers magnifies every value near zero, in PyTorch as in demi, and in half types a
        # ReLU whose input rounds to the other side of zero moves a module's gradients by several %.
        errors = normwise_error if case["op"] in NORMWISE_OPS else relative_errors
        if case["op"] == "model":
            names = model_names(case["params"]["names"], case["params"]["model"])
            rows.append((key, "names", "differs" if names else "ok", math.nan, math.nan,
                         names or "the twin's state_dict names"))
            counts[rows[-1][2]] = counts.get(rows[-1][2], 0) + 1
        for what, d, t, r in compared:
            verdict, ed, et, note = judge(d, t, r, dtype, errors)
            why = intended(mode, case["op"], case["params"], verdict)
            if why:
                verdict, note = "intended", f"{note}: {why}"
            rows.append((key, what, verdict, ed, et, note))
            counts[verdict] = counts.get(verdict, 0) + 1

    print(f"demi vs PyTorch {torch.__version__} (CPU): {len(cases)} cases, errors relative to float64")
    print(f"{'case':48} {'tensor':7} {'verdict':14} {'demi err':>10} {'torch err':>10}  note")
    for key, what, verdict, ed, et, note in rows:
        # The sign of a zero gradient (a masked ReLU's) is noise; of an output, it is a value.
        # Intended differences are documented: counted, listed with --all.
        quiet = verdict in ("ok", "intended") or (verdict == "zero sign" and what.startswith("grad"))
        if quiet and not args.all:
            continue
        print(f"{key:48} {what:7} {verdict:14} {ed:10.2e} {et:10.2e}  {note}")
    print("verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))
    bad = sum(counts.get(v, 0) for v in ("differs", "raised", "mismatch"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
