"""Observation encoders: one per entry, their features concatenated before the torso.

A flat vector observation is flattened (no parameters, the numbers of a plain MLP policy); an
``index`` entry is one-hot encoded; a ``binary`` / ``vector`` entry flattened; an ``image`` goes
through a CNN: pixels scaled to [0, 1], or a symbolic grid (codes, not intensities) embedded per
channel first. The CNN: a small stack of 2x2 convolutions for small grids (MiniGrid's 7x7), the
Nature-DQN stack for images of 64 px and up (``policy.cnn`` overrides the choice).
"""

from __future__ import annotations

import torch
from torch import nn

from rltool.config import PolicyConfig
from rltool.errors import ConfigError
from rltool.modules.mlp import init_linear
from rltool.specs import IMAGE, INDEX, Spec

NATURE_MIN = 64  # images at least this wide and high get the Nature-DQN stack under cnn=auto


def _hwc_to_chw(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "hw":
        return x.unsqueeze(-3)
    if layout == "hwc":
        return x.movedim(-1, -3)
    return x


# each stack's convolutions: (out channels, kernel, stride), each followed by a ReLU
CONV_STACKS = {
    "nature": ((32, 8, 4), (64, 4, 2), (64, 3, 1)),
    "small": ((16, 2, 1), (32, 2, 1), (64, 2, 1)),
}


def _conv_stack(kind: str, channels: int) -> nn.Sequential:
    outs = [c for c, _, _ in CONV_STACKS[kind]]
    ins = [channels, *outs[:-1]]
    convs = [(c_in, *conv) for c_in, conv in zip(ins, CONV_STACKS[kind], strict=True)]
    layers: list[nn.Module] = []
    for c_in, c_out, k, s in convs:
        layers += [nn.Conv2d(c_in, c_out, k, s), nn.ReLU()]
    # the last ReLU on a standard-layout copy: an embedded grid enters channels-last, and
    # Flatten's gradient comes back in the standard layout, where a ReLU backward across the two
    # layouts ran 20x slower than within one (256-frame MiniGrid minibatch, 1 CPU thread). The
    # parameters keep their indices (0, 2, 4), so checkpoints load as before.
    layers.insert(-1, _Contiguous())
    return nn.Sequential(*layers, nn.Flatten())


class _Contiguous(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous()


class ImageEncoder(nn.Module):
    """uint8 image [*, (layout)] -> features [*, cnn_features]."""

    def __init__(self, spec: Spec, cfg: PolicyConfig, name: str):
        super().__init__()
        self.layout, self.symbolic = spec.layout, spec.symbolic
        shape = _hwc_to_chw(torch.zeros(spec.shape), spec.layout).shape
        c, h, w = shape
        kind = _kind(cfg, h, w)
        if kind == "nature" and min(h, w) < 36:
            raise ConfigError(
                f"policy.cnn=nature needs images of at least 36x36 px, but {name!r} is {h}x{w}: "
                "use policy.cnn=small (or auto)"
            )
        if self.symbolic:  # one table per channel: the same code means different things
            self.embed = nn.Embedding(256 * c, cfg.embed_dim)
            self.register_buffer("offset", torch.arange(c) * 256, persistent=False)
            c = c * cfg.embed_dim
        self.convs = _conv_stack(kind, c)
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, c, h, w)).shape[-1]
        self.linear = nn.Sequential(init_linear(nn.Linear(flat, cfg.cnn_features)), nn.ReLU())
        self.out_features = cfg.cnn_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.shape[: x.dim() - (2 if self.layout == "hw" else 3)]
        x = _hwc_to_chw(x.reshape(-1, *x.shape[len(batch) :]), self.layout)  # [N, C, H, W]
        if self.symbolic:
            codes = x.long().movedim(1, -1) + self.offset  # [N, H, W, C]
            # the rows picked with index_select, not nn.functional.embedding: the same forward,
            # but its backward (an index_add) took 0.7 ms where embedding's took 3.1 on a
            # 256-frame MiniGrid minibatch (1 CPU thread): 10% of the whole step
            e = self.embed.weight.index_select(0, codes.reshape(-1))
            x = e.view(*codes.shape[:-1], -1).movedim(-1, 1)  # [N, C*E, H, W]
        else:
            x = x.float() / 255.0
        return self.linear(self.convs(x)).reshape(*batch, -1)


def _kind(cfg: PolicyConfig, h: int, w: int) -> str:
    return cfg.cnn if cfg.cnn != "auto" else ("nature" if min(h, w) >= NATURE_MIN else "small")


def image_encoder_size(spec: Spec, cfg: PolicyConfig) -> tuple[int, int]:
    """(bytes a forward of one sample keeps for backward, the encoder's parameter count) of
    :class:`ImageEncoder` on ``spec``, from the shapes alone (nothing allocated): the float (or
    embedded) input, each convolution's and ReLU's feature maps, the linear layer's weights."""
    c, h, w = _hwc_to_chw(torch.empty(spec.shape, device="meta"), spec.layout).shape
    c = c * cfg.embed_dim if spec.symbolic else c
    kept, params = c * h * w * 4, (256 * c if spec.symbolic else 0)
    for c_out, k, s in CONV_STACKS[_kind(cfg, h, w)]:
        params += c * c_out * k * k + c_out
        c, h, w = c_out, max(0, (h - k) // s + 1), max(0, (w - k) // s + 1)
        kept += 2 * c * h * w * 4  # the convolution's output and the ReLU's
    flat = c * h * w
    return kept + flat * 4, params + flat * cfg.cnn_features + cfg.cnn_features


def entry_features(spec: Spec) -> int:
    if spec.kind == INDEX:
        return spec.n
    return int(torch.Size(spec.shape).numel()) if spec.shape else 1


class ObsEncoder(nn.Module):
    """observation (a tensor, or a TensorDict of entries) -> features [*, out_features]."""

    def __init__(self, spec, cfg: PolicyConfig):
        super().__init__()
        self.nested = hasattr(spec, "entries")
        entries = spec.entries if self.nested else {"observation": spec}
        self.specs = dict(entries)
        self.images = nn.ModuleDict(
            {k: ImageEncoder(s, cfg, k) for k, s in entries.items() if s.kind == IMAGE}
        )
        self.out_features = sum(
            self.images[k].out_features if k in self.images else entry_features(s)
            for k, s in entries.items()
        )
        flat = next(iter(entries.values()))
        # a flat vector observation: flatten only (no module call per step)
        self.plain = not self.nested and flat.kind != IMAGE
        self._n_dims = len(flat.shape)

    def _entry(self, k: str, spec: Spec, x: torch.Tensor) -> torch.Tensor:
        if k in self.images:
            return self.images[k](x)
        if spec.kind == INDEX:
            return nn.functional.one_hot(x.long(), spec.n).float()
        if not spec.shape:
            return x.float().unsqueeze(-1)
        return x.float().flatten(-len(spec.shape)) if len(spec.shape) != 1 else x.float()

    def flatten(self, obs: torch.Tensor) -> torch.Tensor:
        """A flat vector observation's features: the observation, flattened."""
        return obs.flatten(-self._n_dims) if self._n_dims != 1 else obs

    def forward(self, obs) -> torch.Tensor:
        if self.plain:
            return self.flatten(obs)
        if not self.nested:
            return self.images["observation"](obs)
        # a nested observation: a TensorDict, or a dict of its entries (the exported step's)
        parts = [self._entry(k, s, obs[k]) for k, s in self.specs.items()]
        return torch.cat(parts, -1) if len(parts) > 1 else parts[0]
