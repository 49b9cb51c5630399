"""Data-parallel PPO (rltool/distributed/ranks.py, rltool/distributed/launcher.py): CPU, gloo, two
processes."""

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from conftest import cli_env, make_cfg, metric_rows, run_cli, submitit_local

from rltool import train
from rltool.distributed import ranks as distributed
from rltool.distributed.environ import from_slurm
from rltool.envs.normalize import RunningMeanStd

# small and fast: 8 envs x 16 steps, statistics merged (observations and rewards)
SMALL = (
    "collector.frames_per_batch=128",
    "loss.epochs=2",
    "loss.normalize_advantage=false",
    "env.normalize_obs=true",
    "env.normalize_reward=true",
)
RUN = (
    *SMALL,
    "total_frames=1024",
    "eval.every_frames=512",
    "eval.episodes=2",
    "eval.final_episodes=2",
    "checkpoint.every_frames=256",
    "logger.progress=none",
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_merged_statistics_equal_one_process_that_saw_everything():
    rng = np.random.default_rng(0)
    seen, base = RunningMeanStd((3,)), RunningMeanStd((3,))
    first = rng.normal(2.0, 3.0, (50, 3))
    for s in (seen, base):
        s.update(first)
    ranks = [RunningMeanStd((3,)) for _ in range(2)]
    parts = [rng.normal(1.0, 2.0, (n, 3)) for n in (40, 70)]
    for r, x in zip(ranks, parts, strict=True):
        r.update(first)
        r.update(x)
        seen.update(x)
    start = distributed._moments(base)
    moments = start
    for r in ranks:
        moments = distributed.combine(moments, distributed.delta(distributed._moments(r), start))
    distributed._set_moments(base, moments)
    np.testing.assert_allclose(base.mean, seen.mean, rtol=1e-12)
    np.testing.assert_allclose(base.var, seen.var, rtol=1e-10)
    assert base.count == pytest.approx(seen.count)


def _step_worker(rank: int, port: int, out: str, *extra: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    cfg = make_cfg(*SMALL, *extra)
    comm = distributed.join(cfg)
    run = train.build(cfg, None, comm)
    comm.attach(run)
    early = []  # buckets started during backward, at each step (distributed.bucket_mb)
    if comm.buckets is not None:
        finish = comm.buckets.finish
        comm.buckets.finish = lambda: (early.append(len(comm.buckets.started)), finish())[1]
    batch = run.collector.collect()
    comm.frames(batch.numel())
    from rltool.losses import add_gae

    add_gae(batch, cfg.loss.gamma, cfg.loss.gae_lambda)
    mb = batch[:, : (8 if rank == 0 else 3)].reshape(-1).clone()  # different data and sizes
    comm.samples = mb.numel()
    train.gradient_step(run, run.algo.loss(mb))
    first = [p.detach().clone() for p in run.policy.parameters()]
    for i in range(3):  # whole updates: collect, merge statistics, PPO epochs
        batch = run.collector.collect()
        frames = comm.frames(batch.numel())
        comm.merge_stats(run.env)
        train.update(run, batch, 0.1 * i, frames)
    flat = torch.cat([p.detach().reshape(-1) for p in run.policy.parameters()])
    stats = [(s.mean.copy(), s.var.copy(), s.count) for s in distributed.running_stats(run.env)]
    mine = {
        "mb": mb.cpu(),
        "first": first,
        "flat": flat,
        "stats": stats,
        "obs": batch["observation"],
        "early": early,
        "buckets": len(comm.buckets.buckets) if comm.buckets else 0,
        "shared": comm.shared is not None,
    }
    torch.save(mine, f"{out}/rank{rank}.pt")
    comm.close()


def _sync_worker(rank: int, port: int, out: str) -> None:
    """Rank 1 is a straggler; distributed.sync_fraction=0.5 cuts its rollouts short."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RLTOOL_DIST_SLOW="1:0.05")
    torch.set_num_threads(1)
    cfg = make_cfg(*SMALL, "distributed.sync_fraction=0.5", "distributed.shared_memory=off")
    comm = distributed.join(cfg)
    run = train.build(cfg, None, comm)
    comm.attach(run)
    lengths, totals = [], []
    for i in range(3):
        batch = comm.collect(run.collector)
        totals.append(comm.frames(batch.numel()))
        comm.merge_stats(run.env)
        train.update(run, batch, 0.1 * i, totals[-1])
        lengths.append(batch.shape[0])
    flat = torch.cat([p.detach().reshape(-1) for p in run.policy.parameters()])
    saved = {"lengths": lengths, "totals": totals, "flat": flat, "shared": comm.shared is not None}
    torch.save(saved, f"{out}/rank{rank}.pt")
    comm.close()


def test_a_straggler_is_cut_short_and_the_ranks_stay_identical(tmp_path):
    mp.spawn(_sync_worker, args=(_port(), str(tmp_path)), nprocs=2, join=True)
    fast, slow = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2))
    assert fast["lengths"] == [16, 16, 16]  # 128 frames of 8 envs
    assert all(4 <= n < 16 for n in slow["lengths"])  # at least a quarter of its steps
    assert fast["totals"] == slow["totals"] == [(16 + n) * 8 for n in slow["lengths"]]
    assert torch.equal(fast["flat"], slow["flat"])
    assert not fast["shared"] and not slow["shared"]  # gloo's all-reduce of one buffer


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    mp.spawn(_step_worker, args=(_port(), str(out)), nprocs=2, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


def test_two_rank_step_equals_one_step_on_both_minibatches(two_ranks):
    cfg = make_cfg(*SMALL)
    run = train.build(cfg)
    both = torch.cat([two_ranks[0]["mb"], two_ranks[1]["mb"]])
    train.gradient_step(run, run.algo.loss(both))
    assert two_ranks[0]["mb"].numel() != two_ranks[1]["mb"].numel()
    before = train.build(cfg).policy.parameters()
    moved = False
    for p, p0, p1, b in zip(
        run.policy.parameters(), two_ranks[0]["first"], two_ranks[1]["first"], before, strict=True
    ):
        torch.testing.assert_close(p0, p.detach(), atol=1e-6, rtol=0)
        torch.testing.assert_close(p1, p.detach(), atol=1e-6, rtol=0)
        moved |= not torch.equal(p.detach(), b.detach())
    assert moved


@pytest.fixture(scope="module")
def bucketed(tmp_path_factory):
    """The two ranks of ``two_ranks`` with gradients all-reduced in ~5 KB buckets."""
    out = tmp_path_factory.mktemp("bucketed")
    mp.spawn(_step_worker, args=(_port(), str(out), "distributed.bucket_mb=0.005"), nprocs=2)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


def test_bucketed_all_reduce_during_backward_equals_one_buffer_after_it(two_ranks, bucketed):
    """Also gloo against shared memory: the one buffer is summed through /dev/shm here."""
    for plain, buckets in zip(two_ranks, bucketed, strict=True):
        assert buckets["buckets"] > 2 and plain["buckets"] == 0
        assert plain["shared"] and not buckets["shared"]
        assert len(buckets["early"]) >= 1 + 3 * 2 and all(n >= 1 for n in buckets["early"])
        # two ranks: each element is the same sum of the same two products, bit for bit
        for p, q in zip(plain["first"], buckets["first"], strict=True):
            assert torch.equal(p, q)
        assert torch.equal(plain["flat"], buckets["flat"])
    assert torch.equal(bucketed[0]["flat"], bucketed[1]["flat"])


def test_no_room_in_dev_shm_falls_back_to_gloo_and_leaves_nothing(tmp_path, monkeypatch):
    from rltool.distributed import shared_sum

    monkeypatch.setattr(shared_sum, "SHM", str(tmp_path / "missing"))
    assert shared_sum._create(1024) is None
    monkeypatch.setattr(shared_sum, "SHM", str(tmp_path))
    path = shared_sum._create(1024)
    assert os.path.getsize(path) == 1024  # the pages reserved up front
    os.unlink(path)

    def full(fd, offset, size):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    assert shared_sum._create(1024) is None
    assert list(tmp_path.iterdir()) == []


def test_parameters_and_statistics_stay_identical_across_ranks(two_ranks):
    a, b = two_ranks
    assert not torch.equal(a["obs"], b["obs"])  # each rank has its own envs
    assert torch.equal(a["flat"], b["flat"])
    for (m0, v0, n0), (m1, v1, n1) in zip(a["stats"], b["stats"], strict=True):
        assert n0 == n1 and n0 > 4 * 128  # every rank's frames
        np.testing.assert_array_equal(m0, m1)
        np.testing.assert_array_equal(v0, v1)


def _torchrun(*args, cwd, env=None, wait=True):
    cmd = [sys.executable, "-m", "torch.distributed.run", *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, env=cli_env(env), stderr=subprocess.PIPE, text=True)
    return subprocess.run(
        cmd, cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=240
    )


def test_world_of_one_through_torchrun_writes_the_plain_runs_metrics(tmp_path):
    plain = run_cli("train", *RUN, "hydra.run.dir=plain", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    one = _torchrun(
        "--standalone",
        "--nproc-per-node=1",
        "-m",
        "rltool",
        "train",
        *RUN,
        "hydra.run.dir=one",
        cwd=tmp_path,
    )
    assert one.returncode == 0, one.stderr
    assert metric_rows(tmp_path / "one") == metric_rows(tmp_path / "plain")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "plain"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("straight")
    r = run_cli("train", *RUN, "distributed.nproc_per_node=2", "hydra.run.dir=run", cwd=cwd)
    assert r.returncode == 0, r.stderr
    return cwd / "run"


def test_two_ranks_write_one_run_folder(straight):
    rows = metric_rows(straight)
    assert [int(r["frames"]) for r in rows] == [256, 512, 768, 1024]  # both ranks' frames
    assert sorted(p.name for p in straight.parent.iterdir()) == ["run"]
    body = torch.load(straight / "checkpoints" / "ckpt-000000001024.pt", weights_only=True)
    assert len(body["ranks"]) == 2 and "episodes" not in body["state"]


@pytest.mark.slow  # end to end, several processes: 15-30 s on CI
def test_killed_and_resumed_two_rank_run_matches_the_straight_run(straight, tmp_path):
    kill = {"RLTOOL_CHECKPOINT_KILL": "before_pointer@3"}  # rank 0 dies writing at 768 frames
    r = run_cli(
        "train", *RUN, "distributed.nproc_per_node=2", "hydra.run.dir=run", cwd=tmp_path, env=kill
    )
    assert r.returncode != 0
    assert "rank 0 stopped (signal SIGKILL)" in r.stderr.splitlines()[-1]
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip().endswith("512.pt")
    r = run_cli("train", "resume=run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert metric_rows(tmp_path / "run") == metric_rows(straight)


def test_resume_with_another_world_size_is_refused(straight, tmp_path):
    r = run_cli(
        "train",
        f"resume={straight}",
        "distributed.nproc_per_node=1",
        "total_frames=2048",
        cwd=tmp_path,
    )
    assert r.returncode == 2
    assert "written by 2 process(es), this run has 1" in r.stderr.strip().splitlines()[-1]


def _broken_run(tmp_path, timeout_s: int, hook: str):
    """A 2-rank run whose rank 1 is killed or stopped (RLTOOL_DIST_KILL) at its 2nd update."""
    return run_cli(
        "train",
        *RUN,
        "distributed.nproc_per_node=2",
        f"distributed.timeout_s={timeout_s}",
        "hydra.run.dir=run",
        cwd=tmp_path,
        env={"RLTOOL_DIST_KILL": hook},
    )


def test_a_killed_rank_stops_the_others_with_one_line(tmp_path):
    t0 = time.monotonic()
    r = _broken_run(tmp_path, 20, "1@2")
    assert r.returncode == 76
    assert time.monotonic() - t0 < 60
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("rltool train: rank 1 stopped (signal SIGKILL)"), r.stderr
    assert "resume=" in last


def test_bad_input_is_refused_before_any_rank_starts(tmp_path, cli):
    r = cli("train", "loss=dqn", "distributed.nproc_per_node=2", cwd=tmp_path)
    assert r.returncode == 2
    assert (
        r.stderr.strip().splitlines() == [r.stderr.strip().splitlines()[-1]]
        and "distributed.nproc_per_node=2 is invalid" in r.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_cfg_job_shows_a_distributed_config_without_starting_ranks(tmp_path, cli):
    r = cli("train", "distributed.nproc_per_node=2", "--cfg", "job", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "nproc_per_node: 2" in r.stdout and list(tmp_path.iterdir()) == []


@pytest.mark.slow  # end to end, several processes: 15-30 s on CI
def test_sigterm_to_the_launcher_checkpoints_and_exits_75(tmp_path):
    from conftest import start_cli

    long = (*SMALL, "total_frames=100000", "checkpoint.every_frames=null", "logger.progress=none")
    p = start_cli("train", *long, "distributed.nproc_per_node=2", "hydra.run.dir=run", cwd=tmp_path)
    metrics = tmp_path / "run" / "metrics.csv"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        metrics.exists() and len(metrics.read_text().splitlines()) > 2
    ):
        time.sleep(0.2)
    p.terminate()
    _, err = p.communicate(timeout=90)
    assert p.returncode == 75, err
    assert "stopped by SIGTERM" in err
    r = run_cli("train", "resume=run", "total_frames=2048", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_two_nodes_on_localhost_with_c10d_rendezvous(tmp_path):
    port = _port()
    common = [
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=t",
    ]
    argv = ["-m", "rltool", "train", *RUN, "hydra.run.dir=run"]
    nodes = [_torchrun(*common, *argv, cwd=tmp_path, wait=False) for _ in range(2)]
    errs = [n.communicate(timeout=240)[1] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], errs
    assert len(metric_rows(tmp_path / "run")) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_slurm_variables_become_torchs():
    env = {
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_ID": "123456",
        "SLURM_JOB_NODELIST": "gpu[07-08],cpu1",
    }
    from_slurm(env)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("3", "4", "1")
    assert env["MASTER_ADDR"] == "gpu07" and env["MASTER_PORT"] == str(20_000 + 3456)
    one = {"SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"}
    from_slurm(one)
    assert "RANK" not in one  # a one-task job (a sweep's) stays one process


def test_faked_slurm_step_of_two_tasks_trains_one_run(tmp_path):
    base = {
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_JOB_ID": str(_port()),
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "rltool", "train", *RUN, "hydra.run.dir=run"],
            cwd=tmp_path,
            env=cli_env(base | {"SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)}),
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    errs = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert len(metric_rows(tmp_path / "run")) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.slow  # ~45 s: timeout_s, then the elastic agent's 30 s grace before its SIGKILL
def test_a_hung_rank_stops_the_others_after_the_timeout(tmp_path):
    r = _broken_run(tmp_path, 5, "1@2:STOP")
    assert r.returncode == 76
    assert "hung longer than distributed.timeout_s" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("rltool train: rank 1 stopped")


def test_a_submitit_job_of_two_tasks_is_one_two_rank_run(tmp_path, monkeypatch, capsys):
    from rltool.cli import main

    sweep = tmp_path / "sweep"
    args = submitit_local(monkeypatch, sweep, "hydra.launcher.tasks_per_node=2", "seed=0", *RUN)
    assert main(args) == 0
    assert "1 done" in capsys.readouterr().out
    rows = metric_rows(sweep / "0")
    assert [int(r["frames"]) for r in rows] == [256, 512, 768, 1024]  # both tasks' frames
    body = torch.load(sweep / "0" / "checkpoints" / "ckpt-000000001024.pt", weights_only=True)
    assert len(body["ranks"]) == 2
