#!/usr/bin/env bash
# The README's main job: train the bundled fox scene with `ns-train jax-gs`, export the PLY with
# `ns-export gaussian-splat`, and print the held-out PSNR (every 8th view) from `ns-eval`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system_deps.sh
out="${OUT_DIR:-outputs}"
steps="${STEPS:-1500}"
device="${DEVICE:-cpu}"
run="$out/fox/jax-gs-mcmc/main"
# jax-gs-mcmc (3DGS-MCMC density control) from 20,000 random Gaussians, with the recipe measured for
# this short run: full resolution from the start, the means' learning rate decaying over the run,
# black background
ns-train jax-gs-mcmc --data data/fox --output-dir "$out" --timestamp main --max-num-iterations "$steps" \
  --vis tensorboard --machine.device-type "$device" --viewer.quit-on-train-completion True \
  --pipeline.model.num-random 20000 --pipeline.model.random-scale 1.0 \
  --pipeline.model.num-downscales 0 --pipeline.model.background-color black \
  --optimizers.means.scheduler.max-steps "$steps" \
  nerfstudio-data --eval-mode interval --eval-interval 8
ns-export gaussian-splat --load-config "$run/config.yml" --output-dir "$run/export"
ns-eval --load-config "$run/config.yml" --output-path "$run/eval.json"
python - "$run" <<'PY'
import json, sys
r = json.load(open(f"{sys.argv[1]}/eval.json"))["results"]
print(f"held-out PSNR {r['psnr']:.2f} dB, SSIM {r['ssim']:.3f}; splat: {sys.argv[1]}/export/splat.ply")
PY
