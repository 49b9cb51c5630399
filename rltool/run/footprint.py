"""What the observations of a run take everywhere, checked before anything is built on them.

The collector and the replay check their own storage; this adds up every place observations
occupy memory together, right after the env is made (its vector buffers are zeros the OS has not
yet given pages) and before the policy, the collector or the eval envs exist: the rollout
(observation and next observation), the replay in memory, the vector env's buffers (the async
backend's shared memory, its workers' copies), the normalisation's float copies, the eval
collector, the activations a forward over one minibatch keeps for backward (the image encoder's
feature maps) and the image encoder's weights with their gradients and Adam moments. Large
images (3 x 1024 x 1024 uint8, 16 envs, a 2,048-frame rollout) are then refused in one line
naming the largest term and the key that lowers it, not after minutes of swapping.
"""

from __future__ import annotations

from rltool.data.sizes import GB, available_memory, spec_bytes
from rltool.errors import ConfigError
from rltool.modules.encoders import image_encoder_size
from rltool.specs import IMAGE, CompositeSpec

FIXES = {  # the keys whose fix is not "lower <key>"
    "loss.num_minibatches": "raise loss.num_minibatches",
    "env.normalize_obs": "set env.normalize_obs=false",
    "policy.cnn_features": "lower policy.cnn_features, or use smaller images",
}
PARAM_COPIES = 4  # weight, gradient, Adam's two moments (float32 each)


def terms(cfg, observation) -> dict[str, tuple[int, str]]:
    """``{what: (bytes, the key that lowers it)}`` of the observations of ``cfg``'s run."""
    entries = observation.entries if isinstance(observation, CompositeSpec) else {"": observation}
    step = spec_bytes(observation)
    floats = sum(4 * _numel(s.shape) for s in entries.values())
    env, frames = cfg.env, cfg.collector.frames_per_batch
    out = {
        "the rollout": (2 * frames * step, "collector.frames_per_batch"),
        "the vector env's buffers": (
            env.num_envs * step * (3 if env.backend == "async" else 1),
            "env.num_envs",
        ),
        "the eval collector": (2 * cfg.eval.episodes * step, "eval.episodes"),
    }
    if env.normalize_obs:
        out["observation normalisation"] = (2 * env.num_envs * floats, "env.normalize_obs")
    on_policy = hasattr(cfg.loss, "num_minibatches")  # PPO; the others learn from a replay
    if not on_policy and cfg.buffer.storage == "memory":  # a PPO config may hold no buffer
        out["the replay"] = (2 * cfg.buffer.size * step, "buffer.size")
    kept, params = 0, 0
    for spec in entries.values():
        if spec.kind == IMAGE:
            k, p = image_encoder_size(spec, cfg.policy)
            kept, params = kept + k, params + p
    if kept:
        mb, key = _minibatch(cfg)
        out["a minibatch's forward"] = (mb * kept, key)
        out["the image encoder's weights"] = (
            PARAM_COPIES * 4 * params,
            "policy.cnn_features",
        )
    return out


def _minibatch(cfg) -> tuple[int, str]:
    """Frames in one gradient step's forward, and the key that lowers it."""
    n = getattr(cfg.loss, "num_minibatches", None)
    if n is not None:
        return cfg.collector.frames_per_batch // n, "loss.num_minibatches"
    window = cfg.buffer.seq_len if cfg.policy.kind != "mlp" else 1  # sequences: seq_len steps
    return cfg.buffer.batch_size * window, "buffer.batch_size"


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def check(cfg, observation, have: int | None = None) -> None:
    """Raises a ConfigError when :func:`terms` add up to more than the free memory (``have``,
    default the system's available memory), naming the largest term and its key."""
    have = available_memory() if have is None else have
    parts = terms(cfg, observation)
    need = sum(b for b, _ in parts.values())
    if have is None or need <= have:
        return
    name, (big, key) = max(parts.items(), key=lambda kv: kv[1][0])
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    raise ConfigError(
        f"{key}={str(value).lower() if isinstance(value, bool) else value}: the observations "
        f"({spec_bytes(observation):,} bytes each) need ~{need / GB:.1f} GB of memory in all; "
        f"{have / GB:.1f} GB are available. The largest part is {name} (~{big / GB:.1f} GB): "
        f"{FIXES.get(key, 'lower ' + key)}"
    )
