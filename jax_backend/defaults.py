"""The defaults the backend and the nerfstudio plugin share, each written once: numbers only, no
JAX (the plugin's configs, which nerfstudio imports for every ns-* command, read them without
starting it). The backend's dataclasses and the plugin's configs both take their defaults here.
"""
from __future__ import annotations

ADAM_EPS = 1e-15

# Adam's rates of the Gaussians' groups (3DGS's and splatfacto's); the means' are times the scene
# extent and decay to MEANS_LR_FINAL over the run
GAUSSIAN_LRS = {"means": 1.6e-4, "scales": 5e-3, "quats": 1e-3, "opacities": 5e-2, "sh0": 2.5e-3, "shN": 2.5e-3 / 20}
MEANS_LR_FINAL = 1.6e-6
# the per-view corrections' groups, splatfacto's (a rate decaying to lr_final after a warm-up from 0)
CAMERA_OPT_ADAM = dict(lr=1e-4, lr_final=5e-7, warmup_steps=1000)
BILATERAL_GRID_ADAM = dict(lr=2e-3, lr_final=1e-4, warmup_steps=1000)

# 3DGS-MCMC (Kheradmand et al. 2024; gsplat's MCMCStrategy, newer splatfacto's names in the plugin)
MCMC_BUDGET = 1_000_000
MCMC_NOISE_LR = 5e5
MCMC_OPACITY_REG = 0.01
MCMC_SCALE_REG = 0.01

# 2DGS's geometry terms (Huang et al. 2024): the paper's normal weight and start steps; the
# distortion off, as in the paper's code (docs/2dgs.md: measured)
SURFEL_NORMAL_LAMBDA = 0.05
SURFEL_NORMAL_START = 7000
SURFEL_DISTORTION_LAMBDA = 0.0
SURFEL_DISTORTION_START = 3000
SURFEL_DEPTH_MODE = "expected"  # the depth the surface normals come from: "expected" or "median"
