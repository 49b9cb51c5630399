#!/usr/bin/env bash
# The release check: build the wheel and the sdist, install the wheel into a fresh venv (the CPU
# torch first, so nothing pulls a CUDA build), and from a folder outside the repository print the
# version and train for a moment: the configs must come from inside the wheel. Exit 0 on success.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python -m build --outdir "$work/dist" "$repo" >"$work/build.log" 2>&1 || {
  cat "$work/build.log"
  exit 1
}
ls "$work"/dist/rltool-*.whl "$work"/dist/rltool-*.tar.gz
python -m venv "$work/venv"
"$work/venv/bin/pip" install -q torch==2.13.0
"$work/venv/bin/pip" install -q "$work"/dist/rltool-*.whl
cd "$work"
want="rltool $(python -c 'import importlib.metadata as m; print(m.version("rltool"))')"
got="$("$work/venv/bin/rltool" --version)"
[ "$got" = "$want" ] || { echo "rltool --version printed '$got', expected '$want'"; exit 1; }
WANDB_MODE=disabled "$work/venv/bin/rltool" train env=cartpole policy=mlp total_frames=2048 \
  eval.episodes=2 logger.progress=none hydra.run.dir="$work/run"
test -f "$work/run/config.yaml" && head -1 "$work/run/config.yaml"
echo "wheel check: passed ($got)"
