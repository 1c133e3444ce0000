"""A run's static settings (`TrainConfig`): hashable, compiled into the block program; what the
step (`step.py`) and the `Trainer` read."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Tuple, Union

from .bilateral import BilateralGridConfig
from .cameras import CameraOptConfig
from .optim import OptimConfig
from .splat_kind import GAUSSIANS_3D, SplatKind
from .strategy import DefaultStrategy, Strategy


@dataclass(frozen=True)
class TrainConfig:
    """Static settings of a run (hashable: they are compiled into the block program)."""

    max_steps: int = 30_000  # the run's last step: no density control after it
    steps_per_block: int = 100
    rasterizer: str = "auto"  # `rendering.composite.resolve_rasterizer`: pallas on a GPU, else flat
    rasterize_mode: str = "classic"  # or "antialiased" (`rendering.projection`)
    tile_size: int = 16  # tile edge in pixels of the training renders (the same images at any size; 0: the
    # Trainer picks `rendering.composite.auto_tile_size` for its rasterizer and platform)
    camera_model: str = "pinhole"  # how the training views' cameras draw ("fisheye": with Dataset.distortions)
    sh_degree: int = 3
    sh_degree_interval: int = 1000  # one more SH band every this many steps
    background: Union[str, Tuple[float, float, float]] = "black"  # "black" | "white" | "random" | (r, g, b)
    ssim_lambda: float = 0.2
    max_gauss_ratio: float = 0.0  # > 0: scale regularisation (`loss.scale_regularization`) every 10 steps
    num_downscales: int = 0  # coarse to fine: train at 1 / 2^num_downscales of the resolution first, ...
    resolution_schedule: int = 3000  # ... doubling it every this many steps, ...
    full_resolution_at: float = 0.5  # ... and at full resolution from this fraction of max_steps at the latest
    strategy: Strategy = field(default_factory=DefaultStrategy)
    optim: OptimConfig = field(default_factory=OptimConfig)
    camera_opt: CameraOptConfig = field(default_factory=CameraOptConfig)  # pose corrections (`cameras.py`)
    bilateral: BilateralGridConfig = field(default_factory=BilateralGridConfig)  # appearance (`bilateral.py`)
    splats: SplatKind = GAUSSIANS_3D  # the kind of splat trained (`splat_kind`: 3D Gaussians or 2DGS disks)
    seed: int = 0

    @property
    def steps_per_level(self) -> int:
        """Steps at each coarse resolution: `resolution_schedule`, shortened when the run is too
        short to reach full resolution by `full_resolution_at` of its steps (a 2,000-step run would
        otherwise never train at full resolution with splatfacto's 2 levels of 3,000 steps, and its
        renders at full resolution come out blurred and full of holes); unchanged for runs of
        num_downscales x resolution_schedule / full_resolution_at steps or more (splatfacto's 30,000)."""
        if self.num_downscales <= 0:
            return max(self.resolution_schedule, 1)
        coarse = int(self.max_steps * self.full_resolution_at)
        return max(min(self.resolution_schedule, coarse // self.num_downscales), 1)

    @property
    def corrections(self) -> dict:
        """The enabled per-view corrections (`corrections.py`), keyed by their `TrainState` field."""
        return {name: c for name, c in (("cameras", self.camera_opt), ("bilateral", self.bilateral)) if c.enabled}

    def downscale_at(self, step: int) -> int:
        """Training images are downscaled by this factor from `step` on (coarse to fine)."""
        return 2 ** max(self.num_downscales - step // self.steps_per_level, 0)


BACKGROUNDS = ("black", "white", "random")
