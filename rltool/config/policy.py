"""The ``policy`` group's schema (``conf/policy/*.yaml``); the memory's own keys are its spec's
(``rltool/memories.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rltool import memories
from rltool.config.fields import check, check_fields, choice, ranged

INPUTS = ("observation", "prev_action", "prev_reward")


@dataclass
class PolicyConfig:
    # mlp (no memory) | lstm | gru | mingru | ffm | trxl | <python.module>:<name> (a user's)
    kind: str = "mlp"
    # MLP torso / heads
    hidden_sizes: list[int] = ranged(ge=1, each=True, factory=lambda: [64, 64])
    encoder_sizes: list[int] = ranged(ge=1, each=True, factory=list)  # MLP before the RNN
    hidden_size: int = ranged(64, ge=1)  # memory width (RNN hidden size, TrXL model width)
    num_layers: int = ranged(1, ge=1)  # memory layers
    shared_torso: bool = False  # critic shares the actor's torso (and RNN)
    # what the policy reads each step: observation, and prev_action / prev_reward (zero at is_init)
    inputs: list[str] = choice(None, INPUTS, each=True, factory=lambda: ["observation"])
    # how a memory runs a loss's sequences: auto = the whole sequence at once (the memory's scan,
    # where it has one), sequential = one step at a time as when acting (slower, the same maths)
    recurrent_mode: str = choice("auto", ("auto", "sequential"))
    # the MLP layers' nonlinearity: tanh (bounded) or relu
    activation: str = choice("tanh", ("tanh", "relu"))
    init_log_std: float = 0.0  # Gaussian heads (continuous actions): the initial log std
    dueling: bool = False  # Q heads only: Q = V + A - mean(A)
    # the image encoder: auto = nature from 64 px up, else small; small = a stack of 2x2
    # convolutions for small grids (MiniGrid's 7x7); nature = the Nature paper's Atari CNN (36 px+)
    cnn: str = choice("auto", ("auto", "small", "nature"))
    cnn_features: int = ranged(256, ge=1)  # the linear layer after the convolutions
    # symbolic images (env.image=symbolic): embedding width per channel
    embed_dim: int = ranged(8, ge=1)
    # the memory's own keys (rltool/memories.py: the spec of policy.kind), listed in
    # conf/policy/<kind>.yaml; a plain mapping here, the spec's dataclass after the checks
    memory: Any = None

    def __post_init__(self):
        check_fields(self, "policy")
        check(
            "observation" in self.inputs, "policy.inputs", self.inputs, "must include observation"
        )
        self._check_memory()

    def _check_memory(self):
        """``memory`` -> the dataclass of ``kind``'s spec (rltool/memories.py), then the spec's
        own check; mlp has no memory (None, or an empty mapping)."""
        if self.kind == memories.NO_MEMORY:
            check(
                not self.memory,
                "policy.memory",
                self.memory,
                "an mlp policy has no memory: choose policy=mlp (not policy.kind=mlp alone)",
            )
            self.memory = None
            return
        spec = memories.get(self.kind)
        self.memory = memories.memory_config(spec, self.memory)
        if spec.check is not None:
            spec.check(self)
