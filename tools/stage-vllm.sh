#!/usr/bin/env bash
# Run ON THE DEVICE, after tools/stage-wheels.sh calls that carried .whl/v1 and .whl/v2 (the parts
# ../shared/device/fetch-vllm.sh makes: vllm 0.26.0 slimmed to its attention kernels, ~72 MB):
# reassemble vllm.tar.xz, unpack it into /tmp/vllm and put /tmp/vllm on /tmp/site/env.sh's PYTHONPATH.
# Then `source /tmp/site/env.sh`; `attnref backends` lists the vllm-* backends as available.
set -euo pipefail
src=/tmp/attnref-wheels
ls "$src"/vllm.tar.xz.part.* > /dev/null
mkdir -p /tmp/vllm /tmp/site
cat "$src"/vllm.tar.xz.part.* | tar xJf - -C /tmp/vllm
echo 'export PYTHONPATH=/tmp/vllm${PYTHONPATH:+:$PYTHONPATH}' >> /tmp/site/env.sh
echo "vllm unpacked into /tmp/vllm ($(du -sh /tmp/vllm | cut -f1))"
# vLLM's backends driven whole (backends/vllm_layers.py) need its config code's packages: into /tmp/vdeps,
# put on PYTHONPATH only for those backends (tools/gpu-campaign.sh part vllmwhole).
if ls /tmp/attnref-vdeps/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vdeps /tmp/attnref-vdeps/*.whl
  echo "vLLM config packages installed into /tmp/vdeps ($(ls /tmp/attnref-vdeps | wc -l) wheels)"
fi
