#!/usr/bin/env bash
# Create or update .venv at the repo root with pinned versions.
#   scripts/bootstrap.sh core   torch + the hub's dependencies, roberta_ext installed editable
#   scripts/bootstrap.sh full   core + fairseq-fixed (compiled, ~3 min on 2 cores) + test tools
# Idempotent: a stamp per level, keyed by the requirement files' contents, skips work already done.
set -euo pipefail
level="${1:-full}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"
venv="$repo/.venv"
pip() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }

stamp_of() { cat "$@" setup.py | sha256sum | cut -c1-16; }

if [ ! -x "$venv/bin/python" ]; then
  echo "[bootstrap] creating $venv"
  "$python" -m venv "$venv"
fi

core_stamp="$venv/.stamp-core-$(stamp_of requirements/core.txt)"
if [ ! -f "$core_stamp" ]; then
  echo "[bootstrap] installing core requirements"
  pip install -q -r requirements/core.txt
  pip install -q --no-deps --no-build-isolation -e .
  touch "$core_stamp"
fi
[ "$level" = core ] && exit 0

full_stamp="$venv/.stamp-full-$(stamp_of requirements/core.txt requirements/fairseq.txt requirements/test.txt)"
if [ ! -f "$full_stamp" ]; then
  echo "[bootstrap] installing fairseq's dependencies and the test tools"
  pip install -q -r requirements/core.txt -r requirements/fairseq.txt -r requirements/test.txt
  if ! "$venv/bin/python" -c "import fairseq" 2>/dev/null; then
    echo "[bootstrap] building fairseq-fixed==0.12.3.1 (about 3 minutes on 2 cores)"
    pip install -q --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
  fi
  touch "$full_stamp"
fi
