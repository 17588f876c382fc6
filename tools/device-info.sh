#!/usr/bin/env bash
# Run ON THE DEVICE: what a results log starts with: the GPU and its driver, torch, the kernel libraries' versions
# ("not installed" where absent) and the UTC date. Usage: bash tools/device-info.sh >> LOG
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
python3 -c "import importlib.metadata as m
for p in ('flash-attn-4', 'flashinfer-python', 'xformers', 'vllm'):
    try: print(p, m.version(p))
    except m.PackageNotFoundError: print(p, 'not installed')"
date -u
