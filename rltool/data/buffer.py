"""Replay for DQN: a ring of steps per env column, sampled as windows of consecutive steps.

Storage: a TensorDict of batch [rows, B] (rows = size // B), in memory or memory-mapped on disk,
written by :meth:`ReplayBuffer.extend` with whole [T, B] rollouts in collection order. A window is
``window`` consecutive steps of one column; it never crosses the write head (where the newest data
meets the oldest), so inside a window time is continuous and every episode start carries the
``is_init`` the collector stored (the memory module resets there). A recurrent state is stored
at every step (the state before it), so any window starts from its stored state.

A sample is a TensorDict [window, N] with ``mask`` [window, N, 1] (True on the ``loss_steps``
after ``burn_in``), ``index`` (the window's start, for priorities) and, when prioritized,
``priority_weight`` [window, N, 1] (importance weights, max 1). MLP policies use windows of
``n_steps`` with only the first step in the loss (transitions with their n-step lookahead);
recurrent ones windows of ``seq_len`` with ``burn_in`` warm-up steps.

``save(path)`` / ``load(path)`` write and read a folder of raw ``.memmap`` tensors and JSON (the
storage, and the sampler state: write position, fill, priorities, RNG). Loading never unpickles:
anything else in the folder is refused before a byte of it is read.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from tensordict import TensorDict, TensorDictBase

from rltool import keys as K
from rltool.data.sizes import available_memory, check_fits, free_disk, spec_bytes
from rltool.errors import UserError

BASE_KEYS = (
    K.OBSERVATION,
    K.IS_INIT,
    K.ACTION,
    K.nxt(K.OBSERVATION),
    K.nxt(K.REWARD),
    K.nxt(K.TERMINATED),
    K.nxt(K.TRUNCATED),
    K.nxt(K.DONE),
)
_TD_TYPES = {"<class 'tensordict._td.TensorDict'>", "TensorDict", "tensordict:TensorDict", None}
_FORMAT = 1
PRIORITY_BYTES = 4  # the float32 priority of each stored step, always in memory


def replay_keys(policy) -> tuple[tuple[str, ...], tuple]:
    """(stored keys, of which recurrent-state keys) for ``policy``; a masked policy's action
    masks, the step's and the next observation's (the target's max runs over its valid actions)."""
    state = tuple(policy.state_specs)
    masks = (K.ACTION_MASK, K.nxt(K.ACTION_MASK)) if getattr(policy, "mask_key", None) else ()
    return (*BASE_KEYS, *masks, *policy.input_specs, *state), state


class ReplayBuffer:
    def __init__(
        self,
        size: int,
        num_envs: int,
        window: int,
        batch_size: int,
        *,
        keys=BASE_KEYS,
        state_keys=(),
        burn_in: int = 0,
        loss_steps: int | None = None,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eta: float = 0.9,
        storage: str = "memory",
        path: str | Path | None = None,
        seed: int = 0,
    ):
        self.rows, self.B = size // num_envs, num_envs
        if self.rows < window:
            raise UserError(
                f"buffer.size={size} holds {self.rows} steps per env, fewer than the "
                f"{window}-step window: raise buffer.size"
            )
        if storage == "memmap" and path is None:
            raise ValueError("a memmap storage needs a path")
        self.window, self.batch_size, self.burn_in = window, batch_size, burn_in
        self.loss_steps = loss_steps if loss_steps is not None else window - burn_in
        self.keys, self.state_keys = tuple(keys), tuple(state_keys)
        self.prioritized, self.alpha, self.beta, self.eta = prioritized, alpha, beta, priority_eta
        self.kind, self.path = storage, Path(path) if path is not None else None
        self.storage: TensorDictBase | None = None  # allocated by the first extend (or load)
        self.write, self.filled = 0, 0  # next row to write; rows holding data (per column)
        self.priority = torch.zeros(self.rows, self.B)
        self.max_priority = 1.0
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        """Transitions stored (all columns)."""
        return self.filled * self.B

    def can_sample(self) -> bool:
        return self.filled >= self.window

    # ---- writing ----
    def _allocate(self, data: TensorDictBase) -> None:
        def empty(x):  # zero-stride placeholders: memmap_like allocates files, not RAM
            return torch.zeros((), dtype=x.dtype).expand(self.rows, *x.shape)

        like = data[0].apply(empty, batch_size=[self.rows, self.B])
        if self.kind == "memmap":
            self.storage = like.memmap_like(self.path, existsok=True)
        else:
            self.storage = like.apply(lambda x: torch.zeros(x.shape, dtype=x.dtype))

    def extend(self, rollout: TensorDictBase) -> None:
        """Appends a [T, B] rollout (the steps following the previous extend's, per column)."""
        T = rollout.shape[0]
        if rollout.shape[1] != self.B or self.rows < T:
            raise ValueError(
                f"rollout {tuple(rollout.shape)} does not fit [<= {self.rows}, {self.B}]"
            )
        data = rollout.select(*self.keys)
        if self.storage is None:
            self._allocate(data)
        rows = (self.write + torch.arange(T)) % self.rows
        self.storage[rows] = data
        self.priority[rows] = self.max_priority
        self.write = (self.write + T) % self.rows
        self.filled = min(self.filled + T, self.rows)

    # ---- sampling ----
    def _oldest(self) -> int:
        return (self.write - self.filled) % self.rows

    def _valid_starts(self) -> torch.Tensor:
        """[rows] bool: rows where a whole window fits before the write head."""
        logical = (torch.arange(self.rows) - self._oldest()) % self.rows
        return logical <= self.filled - self.window

    def sample(self, batch_size: int | None = None) -> TensorDict:
        """``batch_size`` windows, [window, N] (see the module docstring)."""
        if not self.can_sample():
            raise RuntimeError(f"{self.filled} steps per env stored, need {self.window} to sample")
        n, g = batch_size or self.batch_size, self.generator
        weight = None
        if self.prioritized:
            p = self.priority.pow(self.alpha) * self._valid_starts().unsqueeze(1)
            prob = (p / p.sum()).reshape(-1)
            flat = torch.multinomial(prob, n, replacement=True, generator=g)
            # (count P)^-beta normalised by its max, which sits at the smallest P
            weight = (prob[flat] / prob[prob > 0].min()).pow(-self.beta)
        else:
            count = (self.filled - self.window + 1) * self.B
            pick = torch.randint(count, (n,), generator=g)
            start = (self._oldest() + pick // self.B) % self.rows
            flat = start * self.B + pick % self.B
        return self._gather(flat, weight)

    def _gather(self, flat: torch.Tensor, weight: torch.Tensor | None) -> TensorDict:
        W, n = self.window, flat.shape[0]
        start, col = flat // self.B, flat % self.B
        t = (start.unsqueeze(0) + torch.arange(W).unsqueeze(1)) % self.rows  # [W, n]
        c = col.unsqueeze(0).expand(W, n)
        steps = [k for k in self.keys if k not in self.state_keys]
        td = self.storage.select(*steps)[t, c]
        for k in self.state_keys:  # read only at the window's first step: the policy starts there
            s0 = self.storage.get(k)[start, col]
            td.set(k, s0.unsqueeze(0).expand(W, *s0.shape))
        step = torch.arange(W).view(W, 1, 1)
        mask = (step >= self.burn_in) & (step < self.burn_in + self.loss_steps)
        td.set(K.MASK, mask.expand(W, n, 1))
        td.set(K.INDEX, flat.unsqueeze(0).expand(W, n))
        if weight is not None:
            td.set(K.PRIORITY_WEIGHT, weight.view(1, n, 1).expand(W, n, 1))
        return td

    def update_priorities(self, sample: TensorDictBase, td_error: torch.Tensor) -> None:
        """Priority of each sampled window from its TD errors [W, N] (zero outside the loss):
        eta * max + (1 - eta) * mean of |error| over the loss steps (R2D2)."""
        if not self.prioritized:
            return
        err = td_error.detach().abs().reshape(sample.shape).cpu()
        mask = sample.get(K.MASK).reshape(sample.shape).cpu()
        mean = (err * mask).sum(0) / mask.sum(0).clamp_min(1)
        prio = self.eta * err.max(0).values + (1 - self.eta) * mean + 1e-6
        flat = sample.get(K.INDEX)[0].cpu()
        self.priority.view(-1)[flat] = prio
        self.max_priority = max(self.max_priority, float(prio.max()))

    # ---- save / load ----
    def _layout(self) -> dict:
        return {"format": _FORMAT, "rows": self.rows, "num_envs": self.B, "window": self.window}

    def save(self, path: str | Path) -> None:
        """Writes ``path``/{buffer.json, storage/, state/}: raw tensors and JSON only."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.storage is not None:
            if (path / "storage").exists():
                shutil.rmtree(path / "storage")
            self.storage.memmap(path / "storage", copy_existing=True)
        self._state().memmap(path / "state", existsok=True)
        layout = self._layout() | {"has_storage": self.storage is not None}
        (path / "buffer.json").write_text(json.dumps(layout))

    def _state(self) -> TensorDict:
        return TensorDict(
            {
                "write": torch.tensor(self.write),
                "filled": torch.tensor(self.filled),
                "priority": self.priority,
                "max_priority": torch.tensor(self.max_priority, dtype=torch.float64),
                "rng": self.generator.get_state(),
            },
            [],
        )

    def load(self, path: str | Path) -> None:
        """Restores what :meth:`save` wrote; refuses (UserError) a folder holding anything but
        raw tensors and JSON, or one saved with another layout."""
        path = Path(path)
        check_plain_tensors(path)
        try:
            layout = json.loads((path / "buffer.json").read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"replay buffer folder {path} is missing or corrupt ({e})") from None
        has_storage = layout.pop("has_storage", False)
        if layout != self._layout():
            raise UserError(
                f"replay buffer in {path} was saved with {layout}, this run needs "
                f"{self._layout()}: use the same env.num_envs, buffer.size and window"
            )
        state = TensorDict.load_memmap(path / "state", allow_pickle=False)
        if has_storage:
            saved = TensorDict.load_memmap(path / "storage", allow_pickle=False)
            if self.kind == "memmap":  # copy: later writes must not change the saved folder
                self.storage = saved.memmap_like(self.path, existsok=True).update_(saved)
            else:
                self.storage = saved.clone()
        self.write, self.filled = int(state["write"]), int(state["filled"])
        self.priority = state["priority"].clone()
        self.max_priority = float(state["max_priority"])
        self.generator.set_state(state["rng"].clone())

    def close(self, delete: bool = False) -> None:
        """Drops the storage; ``delete`` removes a memmap storage's folder."""
        self.storage = None
        if delete and self.kind == "memmap" and self.path is not None and self.path.exists():
            shutil.rmtree(self.path)


def check_plain_tensors(path: Path) -> None:
    """Raise UserError unless every file under ``path`` is a raw ``.memmap`` tensor or JSON, and
    every tensordict ``meta.json`` describes a plain TensorDict: a pickle (or a class to import)
    would run code on load."""
    if not path.is_dir():
        raise UserError(f"replay buffer folder {path} does not exist")
    for f in sorted(path.rglob("*")):
        if f.is_dir():
            continue
        if f.suffix not in (".memmap", ".json") or f.is_symlink():
            raise UserError(
                f"replay buffer folder {path} holds {f.relative_to(path)}, which is not a raw "
                "tensor (a pickle would run code on load): refusing to load it; remove the file "
                "or use a buffer saved by rltool"
            )
        if f.name == "meta.json":
            meta = json.loads(f.read_text())
            entries = [meta, *(v for v in meta.values() if isinstance(v, dict))]
            kinds = {e.get(k) for e in entries for k in ("_type", "type", "_class")}
            if kinds - _TD_TYPES:
                raise UserError(
                    f"replay buffer folder {path}: {f.relative_to(path)} describes non-tensor "
                    f"data ({', '.join(sorted(map(str, kinds - _TD_TYPES)))}): refusing to load it"
                )


def step_bytes(policy) -> int:
    """Bytes one stored transition takes (every key of :func:`replay_keys`), from the policy's
    env specs, inputs and state: what :meth:`ReplayBuffer.extend` will allocate per step."""
    specs = policy.specs
    flags = 4  # is_init, terminated, truncated, done: one bool each
    own = {**policy.input_specs, **policy.state_specs}
    mask = specs.action_mask
    return (
        (2 * spec_bytes(mask) if mask is not None and getattr(policy, "mask_key", None) else 0)
        + 2 * spec_bytes(specs.observation)
        + spec_bytes(specs.action)
        + spec_bytes(specs.reward)
        + flags
        + sum(spec_bytes(s) for s in own.values())
    )


def check_replay_size(cfg, num_envs: int, policy, path) -> None:
    """ConfigError before allocation where ``buffer.size`` transitions (and their priorities,
    float32 in memory) do not fit the memory, or a memmap's disk at ``path``."""
    n = cfg.size // num_envs * num_envs
    per, setting = step_bytes(policy), f"buffer.size={cfg.size}"
    count = f"{n} transitions of {per} bytes"
    prio = n * PRIORITY_BYTES
    if cfg.storage == "memmap":
        fix = "lower buffer.size or set buffer.path to a larger disk"
        check_fits(setting, n * per, count, f"disk at {path}", free_disk(path), fix)
        check_fits(setting, prio, f"{n} priorities", "memory", available_memory(), fix)
        return
    fix = "lower buffer.size or use buffer.storage=memmap"
    have = available_memory()
    check_fits(setting, n * (per + PRIORITY_BYTES), count, "memory for its replay", have, fix)


def make_replay(cfg, n_steps: int, num_envs: int, policy, seed: int, run_dir=None) -> ReplayBuffer:
    """The replay of a ``buffer`` config for ``policy``: windows of ``n_steps`` with one loss step
    for an MLP; ``seq_len`` with ``burn_in`` for a recurrent policy. A memmap without
    ``buffer.path`` lives in ``run_dir``/replay (a temporary folder without a run dir)."""
    keys, state_keys = replay_keys(policy)
    recurrent = bool(state_keys)
    path = cfg.path
    if cfg.storage == "memmap" and path is None:
        path = Path(run_dir) / "replay" if run_dir is not None else tempfile.mkdtemp("-replay")
    check_replay_size(cfg, num_envs, policy, path)
    return ReplayBuffer(
        cfg.size,
        num_envs,
        cfg.seq_len if recurrent else n_steps,
        cfg.batch_size,
        keys=keys,
        state_keys=state_keys,
        burn_in=cfg.burn_in if recurrent else 0,
        loss_steps=None if recurrent else 1,
        prioritized=cfg.prioritized,
        alpha=cfg.alpha,
        beta=cfg.beta,
        priority_eta=cfg.priority_eta,
        storage=cfg.storage,
        path=path,
        seed=seed,
    )
