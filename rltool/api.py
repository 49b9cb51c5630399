"""The public Python API, exported from ``rltool``: compose a config, train, resume, evaluate, load
a policy. Each call does what its command does, in this process (training is ``rltool.fit``:
``rltool.train`` is the module of the training loop, ``rltool/train.py``):

    import rltool

    cfg = rltool.compose("env=cartpole_pomdp", "policy=lstm", "total_frames=20000")
    summary = rltool.fit(cfg, "runs/lstm")                   # rltool train ... hydra.run.dir=
    summary = rltool.resume("runs/lstm", "total_frames=40000")  # rltool train resume=...
    result = rltool.evaluate("runs/lstm", episodes=20)       # rltool eval run=... (eval.json)
    policy, state = rltool.load_policy("runs/lstm")          # the policy for your own loop

Bad input raises ``rltool.errors.UserError`` (its message is the command's one line);
``hooks`` (``rltool.run.hooks.Hooks``) are called from the training loop, per call.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from rltool.config import Config
from rltool.config.saved import saved_config
from rltool.errors import UserError
from rltool.run.hooks import Hooks
from rltool.runfolder import layout
from rltool.runfolder import lock as runlock


def fit(cfg: Config, run_dir: str | Path | None = None, *, hooks: Hooks | None = None) -> dict:
    """Trains ``cfg`` into ``run_dir``, as ``rltool train`` does, holding the folder's lock.

    With ``cfg.resume`` set, continues that run (see ``resume``).

    Args:
        cfg (rltool.config.Config): The config, from ``rltool.compose``.
        run_dir (str | Path | None): The run folder; default ``outputs/<date>/<time>``, as
            ``rltool train``.
        hooks (rltool.Hooks | None): Callbacks of this call only (``on_eval``).

    Returns:
        dict: The summary, as ``summary.json``: frames, wall time, the final and best
            evaluations.

    Raises:
        rltool.errors.UserError: Bad input (the command's one line), or a folder another run
            holds.

    Example:
        ```python
        summary = rltool.fit(rltool.compose("policy=lstm"), "runs/lstm")
        ```
    """
    from rltool.train import train as _train

    run_dir = Path(run_dir or time.strftime("outputs/%Y-%m-%d/%H-%M-%S"))
    run_dir.mkdir(parents=True, exist_ok=True)
    took = runlock.acquire(run_dir)
    try:
        return _train(cfg, run_dir, hooks=hooks)
    finally:
        if took:
            runlock.release(run_dir)


def resume(run_dir: str | Path, *overrides: str, hooks: Hooks | None = None) -> dict:
    """Continues the run in ``run_dir`` from its latest checkpoint, with its saved config.

    Args:
        run_dir (str | Path): The run folder.
        *overrides (str): ``"key=value"`` of the keys a resume may change (``total_frames``,
            logging, checkpointing, evaluation cadence).
        hooks (rltool.Hooks | None): Callbacks of this call only.

    Returns:
        dict: The summary, as ``fit`` returns it.

    Raises:
        rltool.errors.UserError: No checkpoint in ``run_dir``, or an override of a key a resume
            may not change.

    Example:
        ```python
        summary = rltool.resume("runs/lstm", "total_frames=40000")
        ```
    """
    run_dir = Path(run_dir)
    if not layout.has_checkpoint(run_dir):
        raise UserError(f"{run_dir} holds no checkpoint to resume: start a new run")
    cfg = saved_config(run_dir, *overrides)
    return fit(dataclasses.replace(cfg, resume=str(run_dir)), run_dir, hooks=hooks)


def evaluate(
    run_dir: str | Path,
    *,
    episodes: int = 10,
    checkpoint: str | None = None,
    seed: int | None = None,
    num_envs: int | None = None,
    max_steps: int = 100_000,
    video_episodes: int = 0,
) -> dict:
    """``rltool eval`` in this process: greedy episodes of a checkpoint, under the evaluation
    protocol.

    Args:
        run_dir (str | Path): The run folder.
        episodes (int): How many episodes to play.
        checkpoint (str | None): The latest when None; ``"best"`` (the best evaluation's), a
            file name or a frame count.
        seed (int | None): Seeded like training's evaluations when None.
        num_envs (int | None): Envs at once; default ``min(episodes, 8)``.
        max_steps (int): At most this many vector steps.
        video_episodes (int): When > 0, records that many episodes of the first env into
            ``<run>/videos/``.

    Returns:
        dict: What ``rltool eval`` writes to ``eval.json``: the run, checkpoint, frames, seed,
            the return and length statistics, and every episode's return and length.

    Raises:
        rltool.errors.UserError: No run or checkpoint there, or video asked of an env that
            cannot record it.

    Example:
        ```python
        result = rltool.evaluate("runs/lstm", episodes=20, checkpoint="best")
        ```
    """
    from rltool.deploy.inference import restore
    from rltool.run.evaluation import run_episodes, summarize

    restored = restore(Path(run_dir), checkpoint)
    cfg = restored.config
    seed = cfg["seed"] + cfg["eval"]["seed_offset"] if seed is None else seed
    n = num_envs or min(episodes, 8)
    videos = layout.RunFolder(run_dir).videos
    env = _video_env(restored, n, videos, video_episodes) if video_episodes else None
    env = env or restored.make_env(n)
    try:
        returns, lengths = run_episodes(restored.policy, env, seed, episodes, max_steps)
    finally:
        env.close()
    stats = {k.removeprefix("eval/"): v for k, v in summarize(returns, lengths).items()}
    result = {"run": str(run_dir), "checkpoint": restored.checkpoint, "frames": restored.frames}
    result |= {"seed": seed, "num_envs": n, **stats, "returns": returns, "lengths": lengths}
    if video_episodes:
        result["videos"] = sorted(str(p) for p in videos.glob("*.mp4"))
    return result


def _video_env(restored, num_envs: int, folder: Path, episodes: int):
    """The eval env with RecordVideo around its first env (rendering rgb arrays)."""
    from gymnasium.error import DependencyNotInstalled
    from gymnasium.wrappers import RecordVideo

    env_cfg = dataclasses.replace(
        restored.env_cfg, kwargs={**restored.env_cfg.kwargs, "render_mode": "rgb_array"}
    )
    env = restored.make_env(num_envs, env_cfg=env_cfg)
    try:
        first = env.vec_env.envs[0]
        env.vec_env.envs[0] = RecordVideo(
            first, str(folder), episode_trigger=lambda i: i < episodes, disable_logger=True
        )
    except (DependencyNotInstalled, ImportError) as e:
        env.close()
        raise UserError(f"video=true needs {e}: pip install 'rltool[video]'") from None
    except Exception as e:  # noqa: BLE001 - e.g. an env without rgb_array rendering
        env.close()
        raise UserError(
            f"video=true: {restored.env_cfg.id} cannot record video ({type(e).__name__}: {e})"
        ) from None
    return env
