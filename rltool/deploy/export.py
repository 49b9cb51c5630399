"""A trained policy as one file that runs without rltool: ONNX (onnxruntime) or a
``torch.export`` program (``.pt2``, ``torch.export.load``). One sequential step for B envs
(B dynamic), greedy (exploit mode), the run's frozen observation normalisation and
``env.obs_keep`` inside, so the file takes the env's raw observation as
:class:`rltool.deploy.inference.LoadedPolicy` does.

The I/O contract (also in the file: ONNX metadata ``rltool``, the pt2 extra file ``rltool.json``):

inputs, in this order
  ``observation``               the raw observation [B, *shape] (Box: float32, uint8 image: uint8,
                                Discrete / MultiDiscrete: int64 as the env gives them); a Dict /
                                Tuple one as one input per entry, ``observation.<entry>``
                                (``observation.outer.inner``, Tuple entries ``observation.0``)
  ``<state key>``               the memory's state before the step (``recurrent_state_h``
                                [B, L, H], ...; ``critic_*`` for a separate critic torso)
  ``prev_action``               where ``policy.inputs`` has it: the last ``next_prev_action``
  ``prev_reward``               where ``policy.inputs`` has it: the reward the env returned with
                                this observation, [B, 1] float32
  ``is_init``                   [B, 1] bool: True at an episode's first step, where the row's
                                state and previous action / reward are taken as zeros
outputs
  ``action``                    the greedy env action ([B] int64 / [B, k] int64 / [B, d] float32
                                clipped to the action bounds)
  ``next_<state key>``          the state after the step (feed it back as ``<state key>``)
  ``next_prev_action``          the policy's action (before the env's offset), for ``prev_action``
  with ``outputs=full``         the distribution's parameters (``logits``; ``loc``, ``scale``; or
                                ``action_value``) and ``state_value`` where there is a critic

At the first step any state works (zeros): ``is_init`` resets it. The step is the policy's one
step (:meth:`rltool.modules.policy.ActorCritic.step`, ``export=True``), tensor-only: the memories'
one step, resets by masking; FFM's ``export_step`` in real arithmetic for ONNX. The env's
observation space and action bounds come from the checkpoint's env record (no env is built).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rltool import keys as K
from rltool.deploy.inference import Restored, restore
from rltool.envs.normalize import EntryNormalizer, ObsNormalizer
from rltool.envs.spaces import image_layout, space_leaves
from rltool.errors import UserError

FORMATS = ("onnx", "pt2")
EXTRA = {"onnx": "export", "pt2": None}  # the pip extra each format needs beyond torch
METADATA = "rltool"  # the ONNX metadata key / pt2 extra file (rltool.json) of the contract
NEXT = "next_"


class _Entry(nn.Module):
    """One raw observation input -> the policy's tensor: conversion (one-hot, index offset),
    ``obs_keep``, frozen normalisation in float64 (as the env layer's numpy: the same numbers)."""

    def __init__(self, space: gym.Space, nested: bool, keep, norm: ObsNormalizer | None):
        super().__init__()
        self.kind, self.shape, self.dtype = "float", tuple(space.shape or ()), torch.float32
        self.start, self.sizes = 0, []
        if image_layout(space) is not None and keep is None:
            self.kind, self.dtype = "image", torch.uint8
        elif isinstance(space, gym.spaces.Discrete):
            self.kind, self.dtype, self.start = "index", torch.int64, int(space.start)
            self.sizes = [int(space.n)]
        elif isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
            self.kind, self.dtype = "onehot", torch.int64
            self.sizes = [int(n) for n in space.nvec]
            self.register_buffer("starts", torch.as_tensor(space.start, dtype=torch.int64))
        elif not isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
            raise UserError(f"cannot export an observation of {space}: no tensor form for it")
        self.one_hot = self.kind == "onehot" or (self.kind == "index" and not nested)
        self.keep = keep is not None
        if self.keep:
            self.register_buffer("idx", torch.tensor(list(keep)))
        self.norm = norm is not None
        if self.norm:
            s = norm.stats
            self.register_buffer("mean", torch.as_tensor(np.asarray(s.mean, np.float64)))
            self.register_buffer("std", torch.as_tensor(np.sqrt(s.var + norm.eps)))
            self.clip = float(norm.clip)

    def example(self, batch: int) -> torch.Tensor:
        """A valid raw input (the lowest value of a Discrete / MultiDiscrete one)."""
        x = torch.zeros(batch, *self.shape, dtype=self.dtype)
        return x + (self.starts if self.kind == "onehot" else self.start)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "index":
            x = x - self.start
        if self.one_hot:
            cols = x.unsqueeze(-1) - self.starts if self.kind == "onehot" else x.unsqueeze(-1)
            x = torch.cat(
                [nn.functional.one_hot(cols[..., i], n) for i, n in enumerate(self.sizes)], -1
            ).float()
        elif self.kind == "float":
            x = x.float()
        if self.keep:
            x = x.index_select(-1, self.idx)
        if self.norm:
            z = ((x.double() - self.mean) / self.std).clamp(-self.clip, self.clip)
            x = z.to(x.dtype)
        return x


class PolicyStep(nn.Module):
    """The exported step: ``forward({input name: tensor})`` -> ``{output name: tensor}`` (the
    contract of the module docstring). Built from a :class:`~rltool.deploy.inference.Restored`
    run: the raw inputs' conversion (:class:`_Entry`), then the policy's one step
    (:meth:`~rltool.modules.policy.ActorCritic.step` with ``export=True``), then the env's
    action conversion (:class:`~rltool.envs.spaces.ActionMap`)."""

    def __init__(self, restored: Restored, full: bool = False):
        super().__init__()
        policy, self.full = restored.policy, full
        self.policy = policy
        space = restored.record.observation_space
        self.nested = isinstance(space, gym.spaces.Dict | gym.spaces.Tuple)
        norm = restored.obs_norm
        entries = {}
        if self.nested:
            leaves = {".".join(str(k) for k in p): s for p, s in space_leaves(space)}
            norms = norm.norms if isinstance(norm, EntryNormalizer) else {}
            for k in policy.encoder.specs:
                entries[f"{K.OBSERVATION}.{k}"] = _Entry(leaves[k], True, None, norms.get(k))
        else:
            keep = restored.env_cfg.obs_keep
            entries[K.OBSERVATION] = _Entry(space, False, keep, norm)
        self.entries = nn.ModuleDict({k.replace(".", "/"): v for k, v in entries.items()})
        self.obs_names = list(entries)
        self.state_specs = dict(policy.export_state_specs)
        self.input_specs = dict(policy.input_specs)
        self.action_map = restored.record.action_map()

    def inputs(self, batch: int = 3) -> dict[str, torch.Tensor]:
        """Example inputs (zeros; the ``is_init`` of an episode's start) for ``batch`` envs."""
        out = {
            n: e.example(batch) for n, e in zip(self.obs_names, self.entries.values(), strict=True)
        }
        for k, s in {**self.state_specs, **self.input_specs}.items():
            out[k] = s.zeros(batch)
        out[K.IS_INIT] = torch.ones(batch, 1, dtype=torch.bool)
        return out

    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        obs = [e(inputs[n]) for n, e in zip(self.obs_names, self.entries.values(), strict=True)]
        if self.nested:  # the entries as a dict: the encoder reads them by name
            names = [n.split(".", 1)[1] for n in self.obs_names]
            observation = dict(zip(names, obs, strict=True))
        else:
            observation = obs[0]
        step_inputs = {K.OBSERVATION: observation, **{k: inputs[k] for k in self.input_specs}}
        state = {k: inputs[k] for k in self.state_specs}
        step, nxt = self.policy.step(step_inputs, state, inputs[K.IS_INIT], export=True)
        action = step[K.ACTION]
        out = {"action": self.action_map(action)}
        for k in self.state_specs:
            out[NEXT + k] = nxt[k]
        if K.PREV_ACTION in self.input_specs:
            out[NEXT + K.PREV_ACTION] = action
        if self.full:  # the distribution's parameters, then the value
            out.update({k: v for k, v in step.items() if k not in _NOT_PARAMS})
            if K.STATE_VALUE in step:
                out[K.STATE_VALUE] = step[K.STATE_VALUE]
        return out


# the step's outputs that are no distribution parameter
_NOT_PARAMS = (K.ACTION, K.SAMPLE_LOG_PROB, K.CHOSEN_ACTION_VALUE, K.STATE_VALUE)


def contract(step: PolicyStep, fmt: str, run, checkpoint: str) -> dict:
    """The file's I/O contract: names, shapes (B for the envs) and dtypes, in order."""
    out = step(step.inputs())

    def rows(tensors):
        return [
            {"name": k, "shape": ["B", *v.shape[1:]], "dtype": str(v.dtype).removeprefix("torch.")}
            for k, v in tensors.items()
        ]

    return {
        "format": fmt,
        "run": str(run),
        "checkpoint": checkpoint,
        "inputs": rows(step.inputs()),
        "outputs": rows(out),
    }


def _needs(fmt: str) -> None:
    """A one-line UserError naming the extra when a format's packages are missing."""
    if EXTRA[fmt] is None:
        return
    for module in ("onnx", "onnxscript"):
        try:
            __import__(module)
        except ImportError:
            raise UserError(
                f"format={fmt} needs the {module} package: pip install 'rltool[{EXTRA[fmt]}]'"
            ) from None


def _program(step: PolicyStep, memory: str):
    example = step.inputs()
    batch = torch.export.Dim("B", min=1, max=1 << 20)
    shapes = ({k: {0: batch} for k in example},)
    try:
        with torch.no_grad():
            return torch.export.export(step, (example,), dynamic_shapes=shapes, strict=False)
    except Exception as e:  # noqa: BLE001 - any exporter failure: one line naming the memory
        raise UserError(f"cannot export policy.kind={memory}: {_first(e)}") from None


def _first(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def export_policy(
    run_dir,
    fmt: str = "onnx",
    out=None,
    checkpoint: str | None = None,
    full: bool = False,
) -> Path:
    """Writes the run's policy as ``fmt`` (``onnx`` | ``pt2``) to ``out`` (default:
    ``<run>/policy.<fmt>``) and returns its path. The file is written whole or not at all."""
    if fmt not in FORMATS:
        raise UserError(f"format={fmt!r} is unknown: choose one of {', '.join(FORMATS)}")
    _needs(fmt)
    out = Path(out) if out else Path(run_dir) / f"policy.{fmt}"
    if out.is_dir():
        raise UserError(f"out={out} is a folder: give a file name, e.g. out={out}/policy.{fmt}")
    if out.parent != Path(run_dir) and not out.parent.is_dir():
        raise UserError(f"out={out}: no folder {out.parent}; create it or give another file")
    restored = restore(Path(run_dir), checkpoint)
    memory = restored.policy_cfg.kind
    step = PolicyStep(restored, full).eval()
    meta = contract(step, fmt, run_dir, restored.checkpoint)
    program = _program(step, memory)
    tmp = out.with_name(f".tmp-{os.getpid()}-{out.name}")  # the suffix stays: pt2 checks it
    try:
        if fmt == "pt2":
            extra = {f"{METADATA}.json": json.dumps(meta)}
            torch.export.save(program, tmp, extra_files=extra)
        else:
            _onnx(program, tmp, meta, memory)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _onnx(program, path: Path, meta: dict, memory: str) -> None:
    import onnx

    names = [r["name"] for r in meta["inputs"]], [r["name"] for r in meta["outputs"]]
    try:
        onnx_program = torch.onnx.export(
            program, input_names=names[0], output_names=names[1], dynamo=True, verbose=False
        )
        model = onnx_program.model_proto
    except Exception as e:  # noqa: BLE001 - any exporter failure: one line naming the memory
        raise UserError(f"cannot export policy.kind={memory} to ONNX: {_first(e)}") from None
    onnx.helper.set_model_props(model, {METADATA: json.dumps(meta)})
    onnx.save_model(model, str(path))
