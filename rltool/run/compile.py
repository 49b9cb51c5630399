"""``compile=true``: the acting step and the loss (its backward with it) under ``torch.compile``.

What is compiled, in place, after :func:`rltool.train.build`:

- the collector's acting step, ``collector.act`` = ``policy.step(inputs, state, is_init)`` for a
  [B] batch (one graph: encoder, torso, one memory step, heads, the action's draw); not a
  Q-network's (DQN's epsilon, a float annealed at each update, would recompile it);
- the algorithm's loss module's ``forward`` (``algo.loss``: PPO's and DQN's) for a stateless
  policy: the policy re-run over the minibatch, the heads and the loss terms; AOTAutograd
  compiles the backward with it. Not with a memory: its sequence run (the episode cuts are
  data-dependent) breaks the graph, and the graphs around it measured slower than eager
  (0.67-0.72x on the LSTM preset's minibatch: docs/benchmarks/compiled.md).

Functions are compiled, never modules: the state dicts keep their keys (no ``_orig_mod.``), so
checkpoints load into a compiled or an eager run alike. Adam (``FlatAdam``: a handful of flat
kernels already), gradient clipping, GAE and the evaluation stay eager.

On CUDA the mode is ``reduce-overhead`` (CUDA graphs): each call starts a new step
(``torch.compiler.cudagraph_mark_step_begin``) and its outputs are cloned, since the graph's next
replay overwrites its own; this path is not tested here (no GPU on the dev machine).

A compilation that fails (an exception at the first call, or at a later recompilation) prints one
warning line and that function runs eagerly from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from tensordict import TensorDictBase
from torch.utils._pytree import tree_map_only

from rltool.collectors.devices import module_device

_log = logging.getLogger(__name__)


class Compiled:
    """``fn`` compiled with ``torch.compile``, falling back to ``fn`` itself (one warning line)
    once a call of the compiled function raises (and the rest of its ``group`` with it)."""

    def __init__(self, fn: Callable, what: str, group: list, cuda=False, backend="inductor"):
        self.eager, self.what, self.cuda, self.group = fn, what, cuda, group
        mode = "reduce-overhead" if cuda and backend == "inductor" else None
        self.compiled = torch.compile(fn, backend=backend, mode=mode)
        self.failed = False
        group.append(self)  # a failure turns the whole group eager, with one warning

    def __call__(self, *args, **kwargs):
        if self.failed:
            return self.eager(*args, **kwargs)
        if self.cuda:
            torch.compiler.cudagraph_mark_step_begin()
        try:
            out = self.compiled(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 (any failure of the compiler: eager from here)
            for c in self.group:
                c.failed = True
            cause = e.__cause__ or e  # BackendCompilerFailed: the backend's own error
            reason = f"{type(cause).__name__}: {str(cause).strip()[:160]}".splitlines()[0]
            _log.warning(
                f"rltool: warning: compile=true: torch.compile failed on {self.what} "
                f"({reason}); the run goes on eagerly"
            )
            return self.eager(*args, **kwargs)
        return _clone(out) if self.cuda else out


def _clone(out):
    """Outputs kept past the next CUDA graph replay must be copies (torch's rule)."""
    if isinstance(out, TensorDictBase):
        return out.clone()
    return tree_map_only(torch.Tensor, torch.clone, out)


def compile_run(run, backend="inductor") -> None:
    """Compiles ``run``'s acting step and its algorithm's loss in place (see the module
    docstring); ``backend``: torch.compile's (tests pass a failing one)."""
    # dynamo traces torch's LSTM / GRU modules (here: their weights for the fused step) only
    # with this flag: without it the acting step breaks into graphs around the memory (0.5x)
    torch._dynamo.config.allow_rnn = True
    cuda, group = module_device(run.policy).type == "cuda", []
    if not run.policy.is_q:  # a Q-network's annealed epsilon (a float) would recompile it
        run.collector.act = Compiled(run.collector.act, "the acting step", group, cuda, backend)
    loss = getattr(run.algo, "loss", None)
    # around an eager memory the loss's graphs are slower than eager (0.7x, measured)
    if isinstance(loss, torch.nn.Module) and not run.policy.state_specs:
        if hasattr(loss, "scalars_as_tensors"):  # PPO's annealed clip and entropy weight
            loss.scalars_as_tensors()
        loss.forward = Compiled(loss.forward, "the loss", group, cuda, backend)
