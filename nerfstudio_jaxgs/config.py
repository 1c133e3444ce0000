"""`ns-train jax-gs`: registered through the `nerfstudio.method_configs` entry point.

Kept light: nerfstudio imports it for every `ns-*` command, so JAX is imported lazily elsewhere."""
from __future__ import annotations

import torch
from nerfstudio.configs.base_config import MachineConfig
from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
from nerfstudio.plugins.types import MethodSpecification

from .model import JaxGSModelConfig
from .pipeline import JaxGSPipelineConfig
from .trainer import JaxGSTrainerConfig

jax_gs_method = MethodSpecification(
    config=JaxGSTrainerConfig(
        method_name="jax-gs",
        steps_per_eval_image=500,
        steps_per_eval_batch=0,
        steps_per_save=2000,
        steps_per_eval_all_images=5000,
        max_num_iterations=30000,
        mixed_precision=False,
        # nerfstudio defaults to cuda; on a machine without one, the torch side runs on the CPU
        machine=MachineConfig(device_type="cuda" if torch.cuda.is_available() else "cpu"),
        pipeline=JaxGSPipelineConfig(
            datamanager=FullImageDatamanagerConfig(
                dataparser=NerfstudioDataParserConfig(load_3D_points=True),
                cache_images_type="uint8",
            ),
            model=JaxGSModelConfig(),
        ),
        optimizers={},
    ),
    description="3D Gaussian Splatting in JAX/XLA (jax-gs): exact rasterizers, compiled train blocks; CPU, GPU, TPU.",
)
