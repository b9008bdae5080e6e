#!/usr/bin/env bash
# Create or update .venv at the repo root with pinned versions.
#   scripts/bootstrap.sh core   torch + the hub's dependencies, roberta_ext installed editable
#   scripts/bootstrap.sh full   core + fairseq-fixed (compiled once, ~3 min on 2 cores) + test tools
# Idempotent: a stamp per level, keyed by the requirement files' contents, skips work already done.
# The installer is uv (requirements/bootstrap.txt, installed into .venv by pip): the same pinned
# versions as pip, in parallel and from uv's cache. ROBERTA_EXT_INSTALLER=pip installs with pip alone,
# and so does a machine where uv cannot be installed.
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

# uv does not read pip's configuration: the wheel folders pip is told to look in (the CPU build of torch
# lies there on this kind of machine) are handed to uv as they are to pip.
find_links=()
for links in "${PIP_FIND_LINKS:-}" "$(pip config get global.find-links 2>/dev/null || true)"; do
  for link in $links; do find_links+=(--find-links "$link"); done
done
if [ "${ROBERTA_EXT_INSTALLER:-uv}" = uv ] && { [ -x "$venv/bin/uv" ] || pip install -q -r requirements/bootstrap.txt; }; then
  install() { "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --compile-bytecode "${find_links[@]}" "$@"; }
else
  install() { pip install -q "$@"; }
fi

core_stamp="$venv/.stamp-core-$(stamp_of requirements/core.txt)"
if [ ! -f "$core_stamp" ]; then
  echo "[bootstrap] installing core requirements"
  install -r requirements/core.txt
  install --no-deps --no-build-isolation -e .
  touch "$core_stamp"
fi
[ "$level" = core ] && exit 0

full_stamp="$venv/.stamp-full-$(stamp_of requirements/core.txt requirements/fairseq.txt requirements/test.txt)"
if [ ! -f "$full_stamp" ]; then
  echo "[bootstrap] installing fairseq's dependencies and the test tools"
  install -r requirements/core.txt -r requirements/fairseq.txt -r requirements/test.txt
  if ! "$venv/bin/python" -c "import fairseq" 2>/dev/null; then
    echo "[bootstrap] building fairseq-fixed==0.12.3.1 (about 3 minutes on 2 cores the first time)"
    install --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
  fi
  touch "$full_stamp"
fi
