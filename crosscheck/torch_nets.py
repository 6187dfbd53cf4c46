"""The PyTorch twins of demi's nets (models/README.md): the same layers in the same order, and the
same state_dict names, so that a demi checkpoint (train_cifar's model.safetensors) loads into a
twin with load_state_dict(strict=True) and the other way round. tests/models/test_small_cnn.cpp
pins demi's side of the names.

NETS maps each net's name (as train_cifar's --model and bench_train_step's --nets spell it) to its
class; a new net joins by adding its class there. forward_macs() counts any of them.

Used by crosscheck/compare.py (whole-net cases), crosscheck/eval_checkpoint.py and
crosscheck/torch_train_step.py (the timing side of scripts/bench-vs-pytorch).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def conv3x3(c_in, c_out):
    """A 3x3 convolution that keeps the plane's size, without bias (a batch norm follows)."""
    return nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False)


class SmallCNN(nn.Module):
    """Five conv3x3 -> BatchNorm -> ReLU stages of widths 32, 32, 64, 64, 128, a 2x2 max pool after
    the second, fourth and fifth, global average pool, Linear(128, 10). 141,034 parameters.

    `features` is one nn.Sequential: its indices are the state_dict names (features.0.weight is the
    first convolution, features.1.* its batch norm)."""

    def __init__(self):
        super().__init__()
        layers = []
        for c_in, c_out, pool in ((3, 32, False), (32, 32, True), (32, 64, False), (64, 64, True), (64, 128, True)):
            layers += [conv3x3(c_in, c_out), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
            if pool:
                layers.append(nn.MaxPool2d(2))
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc(self.features(x))


class AirBlock(nn.Module):
    """One of AirNet's three blocks: conv3x3 -> max pool 2 -> BN -> GELU -> conv3x3 -> BN -> GELU."""

    def __init__(self, c_in, width):
        super().__init__()
        self.conv1 = conv3x3(c_in, width)
        self.pool = nn.MaxPool2d(2)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x):
        x = F.gelu(self.bn1(self.pool(self.conv1(x))))
        return F.gelu(self.bn2(self.conv2(x)))


class AirNet(nn.Module):
    """airbench94's network (Keller Jordan, https://github.com/KellerJordan/cifar10-airbench) with
    PyTorch's default initialisation and batch norms: a 2x2 convolution 3 -> 24 with bias (the
    "whitening" stem) and GELU, blocks of widths 64, 256, 256, global max pool, Linear(256, 10)
    without bias, logits scaled by 1/9. 1,972,792 parameters."""

    WIDTHS = (64, 256, 256)

    def __init__(self):
        super().__init__()
        self.whiten = nn.Conv2d(3, 24, kernel_size=2, padding=0, bias=True)
        blocks, c_in = [], self.whiten.out_channels
        for width in self.WIDTHS:
            blocks.append(AirBlock(c_in, width))
            c_in = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c_in, 10, bias=False)

    def forward(self, x):
        x = self.blocks(F.gelu(self.whiten(x)))
        return self.fc(torch.amax(x, dim=(2, 3))) * (1.0 / 9.0)  # demi's rounding: times 1/9, not / 9


class CCT(nn.Module):
    """CCT, the Compact Convolutional Transformer (Hassani et al., arXiv:2104.05704;
    https://github.com/SHI-Labs/Compact-Transformers), as models/cct.h builds it: a tokenizer of
    `conv_layers` stages conv3x3 (no bias) -> ReLU -> max pool 3 / 2 / 1, tokens plus a learnable
    positional embedding, torch.nn.TransformerEncoder (pre-norm, GELU, dropout 0, batch_first, a
    final LayerNorm), sequence pooling and Linear(D, 10). Initialised as the paper's code and demi:
    convolutions kaiming_normal_, linear and in-projection weights trunc_normal_(std 0.02) with zero
    biases, positional_emb trunc_normal_(std 0.2)."""

    def __init__(self, num_layers, embed_dim, num_heads, mlp_ratio, conv_layers, conv_channels=64):
        super().__init__()
        side = 32
        for _ in range(conv_layers):
            side = (side - 1) // 2 + 1
        self.positional_emb = nn.Parameter(torch.zeros(1, side * side, embed_dim))
        stages, c_in = [], 3
        for i in range(conv_layers):
            c_out = embed_dim if i + 1 == conv_layers else conv_channels
            stages += [conv3x3(c_in, c_out), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1)]
            c_in = c_out
        self.tokenizer = nn.Sequential(*stages)
        layer = nn.TransformerEncoderLayer(embed_dim, num_heads, dim_feedforward=int(embed_dim * mlp_ratio),
                                           dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, norm=nn.LayerNorm(embed_dim),
                                             enable_nested_tensor=False)
        self.attention_pool = nn.Linear(embed_dim, 1)
        self.fc = nn.Linear(embed_dim, 10)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.MultiheadAttention):
                nn.init.trunc_normal_(m.in_proj_weight, std=0.02)
                nn.init.zeros_(m.in_proj_bias)
        nn.init.trunc_normal_(self.positional_emb, std=0.2)

    def forward(self, x):
        tokens = self.tokenizer(x).flatten(2).transpose(1, 2) + self.positional_emb
        encoded = self.encoder(tokens)
        weights = F.softmax(self.attention_pool(encoded).transpose(1, 2), dim=-1)  # [N, 1, T]
        return self.fc((weights @ encoded).flatten(1))


def cct7():
    """CCT-7/3x1: 7 layers, width 256, 4 heads, MLP ratio 2, one conv stage. 3,765,515 parameters."""
    return CCT(num_layers=7, embed_dim=256, num_heads=4, mlp_ratio=2, conv_layers=1)


def cct4():
    """CCT-4/3x2: 4 layers, width 128, 2 heads, MLP ratio 1, two conv stages. 483,659 parameters."""
    return CCT(num_layers=4, embed_dim=128, num_heads=2, mlp_ratio=1, conv_layers=2)


NETS = {"SmallCNN": SmallCNN, "AirNet": AirNet, "cct7": cct7, "cct4": cct4}


def make(name):
    """The twin called `name`; a KeyError names the choices."""
    if name not in NETS:
        raise KeyError(f"no net '{name}'; choose one of {', '.join(NETS)}")
    return NETS[name]()


def forward_macs(net, image_size=32):
    """Multiply-adds of one image's forward through every Conv2d, Linear and MultiheadAttention (its
    in- and out-projections and its two products q k^T and weights v), found by running one image
    with hooks that read each layer's shapes: (total, [(layer, MACs), ...]) in the order the
    forward runs them."""
    rows = []

    def hook(module, inputs, output):
        if isinstance(module, nn.Conv2d):
            h, w = output.shape[-2:]
            kh, kw = module.kernel_size
            macs = h * w * module.out_channels * (module.in_channels // module.groups) * kh * kw
            what = f"conv{kh}x{kw} {module.in_channels}->{module.out_channels} @ {h}x{w}"
        elif isinstance(module, nn.MultiheadAttention):
            tokens, e = inputs[0].shape[-2], module.embed_dim  # batch_first, one image
            macs = tokens * 4 * e * e + 2 * tokens * tokens * e
            what = f"attention {tokens} tokens x {e} ({module.num_heads} heads)"
        else:
            tokens = output.numel() // module.out_features
            macs = tokens * module.in_features * module.out_features
            what = f"linear {module.in_features}->{module.out_features}" + (f" x {tokens}" if tokens > 1 else "")
        rows.append((what, macs))

    handles = [m.register_forward_pre_hook(lambda m, i: hook(m, i, None)) for m in net.modules()
               if isinstance(m, nn.MultiheadAttention)]
    handles += [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = net.training
    try:
        net.eval()
        with torch.no_grad():
            net(torch.zeros(1, 3, image_size, image_size))
    finally:
        net.train(was_training)
        for handle in handles:
            handle.remove()
    return sum(macs for _, macs in rows), rows
