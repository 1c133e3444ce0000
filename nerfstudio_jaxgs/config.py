"""`ns-train jax-gs`, `jax-gs-fast`, `jax-gs-big`, `jax-gs-mcmc` and `jax-2dgs`: registered through the
`nerfstudio.method_configs` entry point.

Kept light: nerfstudio imports it for every `ns-*` command, so JAX is imported lazily elsewhere."""
from __future__ import annotations

import copy

import torch
from nerfstudio.configs.base_config import MachineConfig
from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
from nerfstudio.engine.optimizers import AdamOptimizerConfig
from nerfstudio.engine.schedulers import ExponentialDecaySchedulerConfig
from nerfstudio.plugins.types import MethodSpecification

from jax_backend import defaults

from .hooks import install_excepthook, install_progress_lines
from .model import Jax2DGSModelConfig, JaxGSModelConfig
from .pipeline import JaxGSPipelineConfig
from .trainer import JaxGSTrainerConfig


install_excepthook()  # every ns-* command imports this module: a missing --load-config is one line too
install_progress_lines()


def _adam(lr, scheduler=None):
    return {"optimizer": AdamOptimizerConfig(lr=lr, eps=defaults.ADAM_EPS), "scheduler": scheduler}


def _correction(adam: dict):
    """A per-view correction's group (`defaults.CAMERA_OPT_ADAM`...): Adam, warm-up and decay."""
    return _adam(adam["lr"], ExponentialDecaySchedulerConfig(lr_final=adam["lr_final"], max_steps=30000,
                                                             warmup_steps=adam["warmup_steps"], lr_pre_warmup=0))


# splatfacto's parameter groups and rates (`--optimizers.means.optimizer.lr` ...); the means' rate is
# times the scene extent in jax-gs (3DGS), and decays over the scheduler's max-steps as splatfacto's
_LR = defaults.GAUSSIAN_LRS
OPTIMIZERS = {
    "means": _adam(_LR["means"], ExponentialDecaySchedulerConfig(lr_final=defaults.MEANS_LR_FINAL, max_steps=30000)),
    "features_dc": _adam(_LR["sh0"]),
    "features_rest": _adam(_LR["shN"]),
    "opacities": _adam(_LR["opacities"]),
    "scales": _adam(_LR["scales"]),
    "quats": _adam(_LR["quats"]),
    "camera_opt": _correction(defaults.CAMERA_OPT_ADAM),  # used with camera-optimizer.mode on
    "bilateral_grid": _correction(defaults.BILATERAL_GRID_ADAM),  # with use-bilateral-grid
}


def _optimizers(**rates) -> dict:
    """OPTIMIZERS (a copy) with the given groups' learning rates changed."""
    groups = copy.deepcopy(OPTIMIZERS)
    for name, lr in rates.items():
        groups[name]["optimizer"].lr = lr
    return groups


def _trainer_config(method_name: str, model: JaxGSModelConfig, optimizers=None,
                    max_num_iterations: int = 30000) -> JaxGSTrainerConfig:
    return JaxGSTrainerConfig(
        method_name=method_name,
        steps_per_eval_image=500,
        steps_per_eval_batch=0,
        steps_per_save=2000,
        steps_per_eval_all_images=5000,
        max_num_iterations=max_num_iterations,
        mixed_precision=False,
        # nerfstudio defaults to cuda; on a machine without one, the torch side runs on the CPU
        machine=MachineConfig(device_type="cuda" if torch.cuda.is_available() else "cpu"),
        pipeline=JaxGSPipelineConfig(
            datamanager=FullImageDatamanagerConfig(
                dataparser=NerfstudioDataParserConfig(load_3D_points=True),
                cache_images_type="uint8",
            ),
            model=model,
        ),
        optimizers=optimizers if optimizers is not None else copy.deepcopy(OPTIMIZERS),
    )


jax_gs_method = MethodSpecification(
    config=_trainer_config("jax-gs", JaxGSModelConfig()),
    description="3D Gaussian Splatting in JAX/XLA (jax-gs): splatfacto's recipe; exact rasterizers, compiled "
                "train blocks; CPU, GPU, TPU.",
)

FAST_STEPS = 2000

# jax-gs-fast: splatfacto's losses, rates and density control, with the run shaped for time to
# quality (docs/time_to_quality.md has each piece's measured effect): FAST_STEPS steps, most of them
# at quarter and half resolution (full resolution for the last 10%), densification from step 300
# to step 1700 under a Gaussian budget (the largest screen gradients first), SH bands every 500
# steps, and the tile size picked for the platform (8 pixels on a CPU).
FAST_MODEL = JaxGSModelConfig(full_resolution_at=0.9, warmup_length=300, stop_split_at=1700, max_gaussians=100_000,
                              sh_degree_interval=500, tile_size=0)

jax_gs_fast_method = MethodSpecification(
    config=_trainer_config("jax-gs-fast", FAST_MODEL, max_num_iterations=FAST_STEPS),
    description="jax-gs shaped for time to quality: 2,000 steps, mostly at lower resolutions, a Gaussian budget; "
                "a real capture in minutes on a CPU.",
)

jax_gs_big_method = MethodSpecification(
    config=_trainer_config("jax-gs-big", JaxGSModelConfig(cull_alpha_thresh=0.005, densify_grad_thresh=0.0005),
                           _optimizers(bilateral_grid=5e-3)),  # splatfacto-big's grid rate
    description="jax-gs with splatfacto-big's recipe: more Gaussians, higher quality, more memory.",
)

jax_gs_mcmc_method = MethodSpecification(
    config=_trainer_config("jax-gs-mcmc", JaxGSModelConfig(strategy="mcmc", max_gaussians=1_000_000,
                                                           cull_alpha_thresh=0.005, stop_split_at=25000)),
    description="jax-gs with 3DGS-MCMC density control: a fixed Gaussian budget (--pipeline.model.max-gaussians).",
)

jax_2dgs_method = MethodSpecification(
    config=_trainer_config("jax-2dgs", Jax2DGSModelConfig()),
    description="2D Gaussian Splatting in JAX/XLA: oriented disks with depth and normals you can mesh "
                "(ns-export tsdf); jax-gs's settings plus the 2DGS losses.",
)
