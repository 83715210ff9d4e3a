#!/usr/bin/env bash
# Installs the newest PyTorch from PyPI into a venv (build/torch-venv unless TORCH_VENV or --venv says
# otherwise), the second PyTorch peer of run.sh (the first is Debian's python3-torch 1.13). PyPI's Linux
# x86-64 wheel is the CUDA build: it pulls about 5 GiB of NVIDIA libraries that the CPU path never loads;
# PyPI has no CPU-only wheel. Minutes on a fast mirror; run.sh skips this peer when the venv is absent.
# The PyPI wheel carries torch.compile (inductor), which run.sh times as its own row; inductor's CPU
# code generation needs a C++ compiler on PATH (g++).
#   bench/train/setup_torch_venv.sh [--venv DIR] [TORCH_SPEC]      e.g. --venv /work/torch-venv 'torch==2.15.0'
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${TORCH_VENV:-build/torch-venv}
if [ "${1:-}" = "--venv" ]; then
  venv=$2
  shift 2
fi
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install --progress-bar off "${1:-torch}" numpy
"$venv/bin/python" -c "import torch; print('torch', torch.__version__)"
