"""Runs a policy exported by ``rltool export format=onnx`` with gymnasium, numpy and onnxruntime
only (no torch, no rltool)::

    rltool export run=outputs/2026-12-02/10-11-12 format=onnx out=lstm.onnx
    python scripts/run_exported.py lstm.onnx --env CartPole-v1 --episodes 5

The file takes the env's raw observation: ``env.obs_keep`` (masked CartPole sees the cart
position and the pole angle only) and the run's observation normalisation are inside it. The
state inputs are read from the file's I/O contract (metadata ``rltool``): zeros to start, then
each ``next_<name>`` output fed back as ``<name>``; ``is_init`` is True at an episode's first step.
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np
import onnxruntime as ort


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the .onnx file rltool export wrote")
    parser.add_argument("--env", default="CartPole-v1", help="the gymnasium env id")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    contract = json.loads(session.get_modelmeta().custom_metadata_map["rltool"])
    outputs = [o["name"] for o in contract["outputs"]]
    # every input but the observation and is_init is carried state (prev_reward: the env's)
    state = {
        i["name"]: np.zeros([1, *i["shape"][1:]], dtype=i["dtype"])
        for i in contract["inputs"]
        if i["name"] not in ("observation", "is_init")
    }
    env = gym.make(args.env)
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=args.seed + episode)
        is_init, total, length, done = np.ones((1, 1), bool), 0.0, 0, False
        while not done:
            feed = {"observation": np.asarray(obs, np.float32)[None], "is_init": is_init, **state}
            out = dict(zip(outputs, session.run(None, feed), strict=True))
            for name in state:  # the state after the step becomes the next step's input
                if f"next_{name}" in out:
                    state[name] = out[f"next_{name}"]
            obs, reward, terminated, truncated, _ = env.step(out["action"][0].item())
            if "prev_reward" in state:
                state["prev_reward"] = np.full((1, 1), reward, np.float32)
            is_init = np.zeros((1, 1), bool)
            total, length, done = total + float(reward), length + 1, terminated or truncated
        print(f"episode {episode}: return {total:.1f}, length {length}")
    env.close()


if __name__ == "__main__":
    main()
