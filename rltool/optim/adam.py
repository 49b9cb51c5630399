"""Adam over flat buffers on the CPU: torch's foreach Adam, bit for bit, in a handful of kernels.

On the CPU, ``torch.optim.Adam(foreach=True)`` runs each of its ~8 ops once per parameter
tensor. :class:`FlatAdam` keeps the parameters, both moments and a copy of the gradients as views
of flat buffers (each tensor on a 64-byte boundary, as its own allocation would be) and runs each
op once over all of them. Every element goes through the same operations, with the same scalars,
in the same order as in ``_multi_tensor_adam`` (without weight decay, amsgrad or maximize), so
the parameters are the same to the bit (tested). Its state dict is an ordinary Adam state dict:
checkpoints load into either. The fused kernel (``optim.fused``) is faster still but rounds
differently.
"""

from __future__ import annotations

import torch

ALIGN = 16  # float32 elements: 64 bytes


def _flattenable(p: torch.Tensor) -> bool:
    return p.device.type == "cpu" and p.dtype == torch.float32 and p.is_contiguous()


class FlatAdam(torch.optim.Adam):
    """``torch.optim.Adam(params, lr, eps, foreach=True)`` with flat buffers where it can: one
    parameter group of contiguous float32 CPU tensors, every one with a gradient at each step
    and the same step count. Anything else steps per tensor, as torch's Adam (the state tensors
    are views of the buffers, so both paths keep them)."""

    def __init__(self, params, lr: float, eps: float):
        super().__init__(params, lr=lr, eps=eps, foreach=True)
        self._flat: tuple[torch.Tensor, ...] | None = None
        self._flatten()

    def _flatten(self) -> None:
        """Moves the parameters' data and the moments into flat buffers (views per tensor)."""
        self._flat = None
        if len(self.param_groups) != 1:
            return
        params = self.param_groups[0]["params"]
        if not params or not all(_flattenable(p) for p in params):
            return
        steps = {float(self.state[p]["step"]) if self.state[p] else 0.0 for p in params}
        if len(steps) != 1:  # a tensor skipped a step (no gradient): per tensor from now on
            return
        (step,) = steps
        offsets, total = [], 0
        for p in params:  # each tensor starts on a cache line, as its own allocation would
            offsets.append(total)
            total += -(-p.numel() // ALIGN) * ALIGN

        def flat(tensors) -> torch.Tensor:
            """One buffer holding ``tensors`` (None: zeros) at the offsets; zeros between them
            (they stay zero through the steps)."""
            buffer = torch.zeros(total)
            for t, p, at in zip(tensors, params, offsets, strict=True):
                if t is not None:
                    buffer[at : at + p.numel()].copy_(t.reshape(-1))
            return buffer

        moment = lambda key: [self.state[p].get(key) for p in params]  # noqa: E731
        self._flat = (
            flat([p.detach() for p in params]),
            flat(moment("exp_avg")),  # None before the first step
            flat(moment("exp_avg_sq")),
            flat([None] * len(params)),  # the gradients, copied in at each step
        )
        places = list(zip(params, offsets, strict=True))
        views = [[b[at : at + p.numel()].view_as(p) for p, at in places] for b in self._flat]
        for p, data, m, v in zip(params, *views[:3], strict=True):
            p.data = data
            state = self.state[p]
            state.setdefault("step", torch.tensor(step))  # float32, as torch's Adam keeps it
            state["exp_avg"], state["exp_avg_sq"] = m, v
        self._grads = views[3]
        self._ptrs = [p.data_ptr() for p in params]

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        self._flatten()  # the loaded moments into the buffers

    def _flat_step_ok(self, group) -> bool:
        params = group["params"]
        return (
            self._flat is not None
            and not (group["weight_decay"] or group["amsgrad"] or group["maximize"])
            and not (group["capturable"] or group["differentiable"])
            and all(p.grad is not None and not p.grad.is_sparse for p in params)
            and [p.data_ptr() for p in params] == self._ptrs  # nothing moved the parameters
        )

    @torch.no_grad()
    def step(self, closure=None):
        group = self.param_groups[0]
        if not self._flat_step_ok(group):
            loss = super().step(closure)
            self._flatten()  # steps may now differ between tensors: flat only while they agree
            return loss
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = group["params"]
        flat, exp_avg, exp_avg_sq, grad = self._flat
        steps = [self.state[p]["step"] for p in params]
        torch._foreach_add_(steps, torch.tensor(1.0), alpha=1.0)
        n = steps[0].item()
        (beta1, beta2), lr, eps = group["betas"], group["lr"], group["eps"]
        torch._foreach_copy_(self._grads, [p.grad for p in params])
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.sqrt().div_((1 - beta2**n) ** 0.5).add_(eps)
        flat.addcdiv_(exp_avg, denom, value=(lr / (1 - beta1**n)) * -1)
        return loss
