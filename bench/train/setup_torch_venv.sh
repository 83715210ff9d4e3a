#!/usr/bin/env bash
# Installs the newest PyTorch from PyPI into build/torch-venv, the second PyTorch peer of run.sh (the
# first is Debian's python3-torch 1.13). PyPI's Linux x86-64 wheel is the CUDA build: it pulls about
# 5 GiB of NVIDIA libraries that the CPU path never loads; PyPI has no CPU-only wheel. Minutes on a
# fast mirror; run.sh skips this peer when the venv is absent.
#   bench/train/setup_torch_venv.sh [TORCH_SPEC]      e.g. 'torch==2.15.0'
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=build/torch-venv
[ -x $venv/bin/python ] || /usr/bin/python3 -m venv $venv
$venv/bin/pip install --progress-bar off "${1:-torch}" numpy
$venv/bin/python -c "import torch; print('torch', torch.__version__)"
