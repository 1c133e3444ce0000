#!/usr/bin/env bash
# The device call (see benchmarks/device_check.py): gsplat (and anything else missing there) travels
# as wheels in .whl/ (carry it); results land in $OUT.
set -uo pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONUNBUFFERED=1  # JAX's GPU allocator: set by device_check.py as the plugin sets it (share_gpu_memory)
nvidia-smi -L 2>/dev/null
python3 -m benchmarks.device_check --out "${OUT:-/tmp/device_check}" 2>&1 | tee "${OUT:-/tmp}/device_check.log"
