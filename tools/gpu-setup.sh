#!/usr/bin/env bash
# Run ON THE DEVICE, in the last of the staging calls (see docs/gpu-offline.md): install the staged
# wheels into /tmp/site, and xformers alone into /tmp/site-xf: flash-attn-4 installs a `flash_attn`
# package without flash_attn_interface, and xformers 0.0.35 imports any `flash_attn` as FA2 and
# fails, so the two cannot share a path. Then: source /tmp/site/env.sh (xformers: PYTHONPATH=/tmp/site-xf).
set -euo pipefail
bash tools/stage-wheels.sh --install > /tmp/stage.log 2>&1 || { cat /tmp/stage.log; exit 1; }
if ls /tmp/attnref-wheels/xformers-*.whl > /dev/null 2>&1; then  # (a run may stage other groups only)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-xf /tmp/attnref-wheels/xformers-*.whl
fi
echo "export FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer-cache ATTNREF_XFORMERS_FORCE_CUDA_FLAG=1" >> /tmp/site/env.sh
tail -1 /tmp/stage.log
