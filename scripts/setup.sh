#!/usr/bin/env bash
# Sets up a fresh machine for dtrain: Debian packages (OpenMPI, bubblewrap; chromium and its driver
# for the dashboard's browser test), a virtual environment with the pinned CPU build of PyTorch,
# and dtrain itself (editable, with test extras).
# Safe to re-run: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

need_apt=()
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
# the dashboard's browser test (tests/test_dashboard_browser.py) drives Debian's chromium
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
command -v mkfs.btrfs >/dev/null 2>&1 || need_apt+=(btrfs-progs)  # the loop-mounted btrfs tests
command -v zsh >/dev/null 2>&1 || need_apt+=(zsh)  # `dtrain completion zsh` is tested in a real zsh
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install ${need_apt[*]} (e.g. sudo apt-get install ${need_apt[*]})" >&2
    exit 1
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('$TORCH_VERSION') else 1)" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION (CPU build)"
  "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
# editable_mode=compat: the checkout goes on sys.path through a plain .pth line. The default
# (an import hook) costs every Python start ~30 ms, a third of a `dtrain` command's start-up.
INSTALLED="editable_mode=compat"
if [ "$(cat "$VENV/.dtrain-installed" 2>/dev/null)" != "$INSTALLED" ] || [ pyproject.toml -nt "$VENV/.dtrain-installed" ]; then
  echo "setup: installing dtrain and its test dependencies"
  "$VENV/bin/pip" install -q --disable-pip-version-check --config-settings "$INSTALLED" -e ".[dev]"
  echo "$INSTALLED" > "$VENV/.dtrain-installed"
fi
# pip compiles what it installs, not an editable checkout: where $PYTHONDONTWRITEBYTECODE is set
# every `dtrain` command would compile ~150 modules again (about half its start-up on 2 cores).
"$VENV/bin/python" -m compileall -q dtrain >/dev/null
echo "setup: ready ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'), $(mpirun --version 2>/dev/null | head -1), $(bwrap --version))"
