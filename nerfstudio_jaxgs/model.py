"""The jax-gs model: a `SplatfactoModel` (so nerfstudio's exporter and viewer treat it as a splat
model) that shows the Gaussians it is given. The pipeline owns the training engine and publishes
its Gaussians after every block (`publish`); a checkpoint loaded without an engine (ns-viewer,
ns-export) gives them too. Its means/scales/quats/opacities/shs are torch views of the JAX arrays
through DLPack. No math here: rendering and training are `jax_backend`'s."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Literal, Optional, Type

import numpy as np
import torch

from nerfstudio.models.splatfacto import SplatfactoModel, SplatfactoModelConfig

from jax_backend import defaults

from .bridge import to_torch
from .cameras import camera_model, camera_model_problem, cameras_to_opencv
from .errors import InputError
from .render_places import RenderPlaces, in_live_render

log = logging.getLogger(__name__)

NO_TORCH_LOSS = ("jax-gs computes its loss and metrics inside the compiled training block "
                 "(jax_backend.training.step), not from torch outputs: nerfstudio's per-batch loss path "
                 "(get_loss_dict, get_metrics_dict, get_eval_loss_dict) is not used by ns-train jax-gs")

@dataclass
class JaxGSModelConfig(SplatfactoModelConfig):
    """jax-gs settings: splatfacto's, under splatfacto's names (each drives the backend, or stops
    the run with one line when it is set to something jax-gs does not implement yet: see
    `settings.py`), plus the jax-gs ones below."""

    _target: Type = field(default_factory=lambda: JaxGSModel)
    background_color: Literal["auto", "random", "black", "white"] = "auto"
    """Background behind the Gaussians: "auto" = the colour the dataparser composites RGBA images
    on (blender-data's alpha-color) for training, evaluation and viewing, otherwise splatfacto's
    rule ("random" in training, black outside it)."""
    random_scale: float = 0.0
    """Where random initial Gaussians start (captures without a point cloud, or random-init): 0
    = in the dataparser's scene box (blender-data's 3-unit cube around the object; the 2-unit cube
    nerfstudio-data and colmap scale the cameras into); a width > 0 = splatfacto's cube that many
    units wide around the origin (splatfacto's default is 10)."""
    init_ply: Optional[Path] = None
    """Start training from the Gaussians of a 3DGS PLY (ns-export gaussian-splat's from jax-gs or
    splatfacto, gsplat's, the INRIA code's), to fine-tune or continue another trainer's result,
    instead of the seed points or random ones. SH bands past sh-degree are dropped, missing ones
    start at zero."""
    init_ply_frame: Literal["nerfstudio", "capture"] = "nerfstudio"
    """The world frame of init-ply's Gaussians: "nerfstudio" (what ns-export writes: the frame the
    dataparser oriented, centred and scaled) or "capture" (the capture's own frame, e.g. COLMAP's,
    as the INRIA code and gsplat's trainer write): jax-gs then moves them by the dataparser's
    transform and scale (dataparser_transforms.json), rotating their SH colours with them."""
    full_resolution_at: float = 0.5
    """Coarse to fine (splatfacto's num-downscales and resolution-schedule): full resolution from this fraction of
    --max-num-iterations at the latest, the coarse levels shortened to fit (splatfacto's 30,000 steps reach it at
    step 6,000). A lower resolution's step costs a fraction of a full one's: jax-gs-fast trains there longer (0.9)."""
    steps_per_block: int = 100
    """Training steps compiled into one XLA program (one trainer iteration advances this many)."""
    rasterizer: Literal["auto", "flat", "standard", "pallas"] = "auto"
    """Rasterizer: "auto" (pallas on a GPU, flat elsewhere), "flat" (all tiles on one axis, built for TPUs/XLA),
    "standard" (vmap over tiles and pixels) or "pallas" (one kernel per pass; interpreted, slow, on a CPU)."""
    tile_size: int = 16
    """Tile edge in pixels of the training renders (the same images at any size): 16 as gsplat; 0 = 8 with the flat
    rasterizer on a CPU (faster there on real captures: docs/time_to_quality.md), else 16 (jax-gs-fast's)."""
    fisheye: Literal["native", "undistorted"] = "native"
    """How fisheye captures (OPENCV_FISHEYE: nerfstudio's FISHEYE cameras, k1-k4) train and draw: "native" = as
    fisheyes, on their original images, over their whole field of view (training, evaluation, ns-render and the
    snapshots); "undistorted" = as splatfacto does, on the pinhole images nerfstudio's datamanager undistorts them to
    (a crop of the field of view). FISHEYE624 (Aria) cameras with coefficients are undistorted either way; fisheyes
    with all-zero coefficients (which nerfstudio does not undistort) draw natively either way."""
    strategy: Literal["default", "mcmc"] = "default"
    """Density control: splatfacto's (gsplat's default: clone/split/prune) or 3DGS-MCMC (fixed budget)."""
    max_gaussians: int = 0
    """Gaussian budget: caps growth (default strategy; 0 = no cap) or the MCMC budget (0 = 1,000,000)."""
    max_gs_num: int = 0
    """Newer splatfacto's name for the MCMC budget: when > 0 it is the budget of an MCMC run (over max-gaussians)."""
    noise_lr: float = defaults.MCMC_NOISE_LR
    """Newer splatfacto's MCMC setting: the scale of the noise added to the means (times their rate)."""
    mcmc_opacity_reg: float = defaults.MCMC_OPACITY_REG
    """Newer splatfacto's MCMC setting: the weight of the mean opacity in the loss."""
    mcmc_scale_reg: float = defaults.MCMC_SCALE_REG
    """Newer splatfacto's MCMC setting: the weight of the mean scale in the loss."""
    snapshot_every: int = 0
    """Every this many steps, write the Gaussians as a PLY and a preview render of the first
    evaluation view under the run's folder (snapshots/), from a background thread while the next
    block trains (0: never)."""
    viewer_bucket: int = 64
    """Viewer renders are padded up to a multiple of this many pixels: small window changes do not recompile."""
    num_devices: int = 0
    """Data-parallel devices (one program over a mesh of them, gradients averaged with pmean; --machine.num-devices
    sets it too): 0 = all local devices on an accelerator, one on a CPU (whose cores deal each view's tiles instead:
    tile-devices). A step trains on num_devices x views_per_device views; the schedules stay per step."""
    views_per_device: int = 1
    """Views each device renders per step (a batch; 1 = the 3DGS recipe)."""
    tile_devices: int = 0
    """The Gaussian shards: each view's tiles are dealt over this many local devices, which
    render them side by side, and the Gaussians, their Adam moments and statistics are split over
    them (a scene larger than one chip). 0 = automatic: on a CPU one host device per core, else 1.
    With num-devices D: D replicas of this many devices each (num-devices x tile-devices devices)."""
    device_memory_gb: float = 0.0
    """Memory of one device jax-gs may fill, GiB (0: what the device reports; a CPU reports none).
    Training images that would take over half of it stay in host memory, each block's views copied
    to the device ahead of it (as with --pipeline.datamanager.cache-images cpu)."""
    seed: int = 0

    def splat_kind(self):
        """The `jax_backend.SplatKind` this config trains and draws, carrying its settings: 3D Gaussians."""
        from jax_backend import GAUSSIANS_3D

        return GAUSSIANS_3D


@dataclass
class Jax2DGSModelConfig(JaxGSModelConfig):
    """jax-2dgs: 2D Gaussian Splatting (Huang et al. 2024), oriented disks whose rendered depth and
    normals describe a surface (`ns-export tsdf` meshes it). jax-gs's settings, plus the settings
    of 2DGS's losses below (the paper's normal weight and start steps, the distortion off as in
    its code: `jax_backend.training.surfels`)."""

    fisheye: Literal["native", "undistorted"] = "undistorted"
    """2DGS draws pinhole cameras only: fisheye captures train on the images nerfstudio undistorts."""
    normal_lambda: float = defaults.SURFEL_NORMAL_LAMBDA
    """Weight of the normal consistency between the disks' blended normals and the rendered depth's
    (the paper's)."""
    normal_start: int = defaults.SURFEL_NORMAL_START
    """Step from which the normal consistency counts (the paper's)."""
    distortion_lambda: float = defaults.SURFEL_DISTORTION_LAMBDA
    """Weight of the depth distortion, sum_ij w_i w_j (z_i - z_j) over camera depth (gsplat's term).
    Off by default, as in the paper's code; its 100 (unbounded) and 1000 (bounded scenes) weigh
    another quantity, squared NDC depth differences (docs/2dgs.md)."""
    distortion_start: int = defaults.SURFEL_DISTORTION_START
    """Step from which the depth distortion counts (the paper's)."""
    normals_from: Literal["expected", "median"] = defaults.SURFEL_DEPTH_MODE
    """The rendered depth the surface normals come from: the expected or the median depth."""

    def splat_kind(self):
        """2DGS disks with this config's geometry terms."""
        from jax_backend import Surfels2D

        return Surfels2D(normal_lambda=self.normal_lambda, normal_start=self.normal_start,
                         distortion_lambda=self.distortion_lambda, distortion_start=self.distortion_start,
                         depth_mode=self.normals_from)


def _shown(name: str, image: np.ndarray, alpha: np.ndarray) -> torch.Tensor:
    """A rendered image as the viewer shows it: normals (world space) as colours (n + 1) / 2
    (nerfstudio's normals shader); a depth with the pixels nothing covers at the image's farthest
    depth (as splatfacto)."""
    if name == "normals":
        image = (image + 1.0) / 2.0
    elif (alpha > 0).any():  # depth, median_depth
        image = np.where(alpha > 0, image, image.max())
    return torch.from_numpy(np.ascontiguousarray(image, np.float32))


class JaxGSModel(SplatfactoModel):
    config: JaxGSModelConfig

    # ------------------------------------------------------------------ setup
    def populate_modules(self):  # no super(): splatfacto's calls .cuda() and gsplat
        from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

        from .initial import initial_gaussians

        scene_box = self.scene_box.aabb.cpu().numpy() if getattr(self, "scene_box", None) is not None else None
        # SplatfactoModel.__init__ keeps the dataparser's seed points in self.seed_points
        self.gaussians = initial_gaussians(self.config, getattr(self, "seed_points", None), scene_box)
        self.splat_kind = self.config.splat_kind()  # what the renders draw (`jax_backend.SplatKind`)
        self.trained_steps = 0  # steps trained to reach `gaussians` (their SH degree)
        self._view_cache = None
        self.places = RenderPlaces(self.config)  # where the renders run
        self.psnr = PeakSignalNoiseRatio(data_range=1.0)
        self.ssim = StructuralSimilarityIndexMeasure(data_range=1.0)
        self.lpips = self._try_lpips()
        self.crop_box = None
        if self.config.camera_optimizer.mode != "off":  # the viewer draws the training cameras with its corrections
            self.camera_optimizer = self.config.camera_optimizer.setup(num_cameras=self.num_train_data, device="cpu")
        self.background_color = torch.zeros(3)  # behind renders: the pipeline's and the viewer's (set_background)
        self.step = 0

    @staticmethod
    def _try_lpips():
        """LPIPS needs pretrained weights from the internet; without them it is left out."""
        try:
            from torchmetrics.image.lpip import LearnedPerceptualImagePatchSimilarity

            return LearnedPerceptualImagePatchSimilarity(normalize=True)
        except Exception as e:  # offline: no weights
            log.warning(f"LPIPS skipped: its pretrained weights are not available ({type(e).__name__})")
            return None

    def publish(self, gaussians, trained_steps: int, pose_deltas=None) -> None:
        """Show `gaussians` (a `jax_backend.Gaussians`, trained for `trained_steps`) from now on: the
        viewer's and eval's renders, the exporter's torch views. `pose_deltas` [views, 6]: the
        learned camera corrections, which the viewer draws."""
        self.gaussians = gaussians
        self.trained_steps = int(trained_steps)
        self._view_cache = None
        if pose_deltas is not None and hasattr(self, "camera_optimizer"):
            with torch.no_grad():
                self.camera_optimizer.pose_adjustment.copy_(torch.from_numpy(np.array(pose_deltas)))

    # ------------------------------------------------------------------ torch views (DLPack)
    def _views(self):
        if self._view_cache is None:
            from jax_backend import alive_first

            compact, n = alive_first(self.gaussians)
            compact = self.splat_kind.exported(compact)  # 2DGS disks: flat 3D Gaussians (third scale thin)
            self._view_cache = {k: to_torch(v)[:n] for k, v in compact.items()}
            self._view_cache["_jax"] = compact  # keeps the buffers the views alias alive
        return self._view_cache

    @property
    def num_points(self):
        return self._views()["means"].shape[0]

    @property
    def means(self):
        return self._views()["means"]

    @property
    def scales(self):
        return self._views()["scales"]

    @property
    def quats(self):
        return self._views()["quats"]

    @property
    def opacities(self):
        return self._views()["opacities"][:, None]

    @property
    def features_dc(self):
        return self._views()["sh0"][:, 0, :]

    @property
    def features_rest(self):
        return self._views()["shN"]

    # jax-gs keeps the DC term as an SH coefficient at every degree; splatfacto's `colors` and
    # `shs_0`, which nerfstudio's exporter reads, take it as a colour logit at SH degree 0
    @property
    def shs_0(self):
        return self.features_dc

    @property
    def colors(self):
        """The DC colour as jax-gs renders it, at every SH degree."""
        from jax_backend import sh0_to_rgb

        return sh0_to_rgb(self.features_dc)

    # ------------------------------------------------------------------ nerfstudio hooks
    def get_param_groups(self) -> Dict[str, List[torch.nn.Parameter]]:
        return {}

    def get_training_callbacks(self, training_callback_attributes):
        return []

    def step_post_backward(self, step):
        pass

    def update_to_step(self, step: int) -> None:
        self.step = step

    def _sh_degree_now(self) -> int:
        from jax_backend import sh_degree_at

        return sh_degree_at(self.trained_steps, self.config.sh_degree_interval, self.config.sh_degree)

    def render(self, camera, background=None, live: bool = False) -> Dict[str, torch.Tensor]:
        """Render one nerfstudio camera: rgb [H,W,3], depth [H,W,1] (expected camera depth),
        accumulation [H,W,1], and the images the kind of splat shows (`SplatKind.shown`; 2DGS: normals
        [H,W,3], world space, as colours (n + 1) / 2, and median_depth [H,W,1], the depth where the
        transmittance reaches 0.5). `live`: a viewer's render while this process trains."""
        problem = camera_model_problem(camera, 0, "the camera to render", rendering=True)
        if problem:
            raise InputError(problem)
        model, distortion = camera_model(camera, 0, self.config.fisheye)
        vm, K, w, h = cameras_to_opencv(camera)
        w, h = int(w[0]), int(h[0])
        b = max(self.config.viewer_bucket, 1)
        W, H = -(-w // b) * b, -(-h // b) * b  # bucketed: extra pixels right and bottom, cropped below
        if background is None:
            background = self.background_color
        bg = np.asarray(background, np.float32).reshape(3)
        keep = None
        if self.crop_box is not None:
            means = torch.from_numpy(np.asarray(self.gaussians.params["means"]))
            keep = self.crop_box.within(means).numpy()
        where = self.places.live if live else self.places.shared
        shown = self.places.gaussians(self.gaussians, where)
        r = self.splat_kind.render(shown, vm[0], K[0], W, H, sh_degree=self._sh_degree_now(),
                                   background=bg, rasterizer=self.config.rasterizer,
                                   rasterize_mode=self.config.rasterize_mode, keep=keep, layout=where,
                                   camera_model=model, distortion=distortion)
        alpha = r.alpha[:h, :w]  # numpy: no program per size
        outputs = {
            "rgb": torch.from_numpy(np.clip(r.rgb[:h, :w], 0.0, 1.0).copy()),
            "depth": _shown("depth", r.depth[:h, :w], alpha),
            "accumulation": torch.from_numpy(alpha.copy()),
            "background": torch.from_numpy(bg.copy()),
        }
        for name in self.splat_kind.shown:  # the kind's own images (2DGS: normals, median depth)
            outputs[name] = _shown(name, r.extras[name][:h, :w], alpha)
        return outputs

    def get_outputs(self, camera) -> Dict[str, torch.Tensor]:
        return self.render(camera)

    view_timer = None  # `JaxGSPipeline.time_live_renders`: told each viewer render's seconds while training

    @torch.no_grad()
    def get_outputs_for_camera(self, camera, obb_box=None) -> Dict[str, torch.Tensor]:
        self.crop_box, t0 = obb_box, time.perf_counter()
        live = self.view_timer is not None and in_live_render()  # a viewer's render while this process trains
        try:
            out = self.render(camera.reshape((1,)) if camera.shape == () else camera[:1], live=live)
        finally:
            self.crop_box = None
        if live:
            self.view_timer(time.perf_counter() - t0)
        return out

    def get_gt_img(self, image: torch.Tensor):
        if image.dtype == torch.uint8:
            image = image.float() / 255.0
        return image

    def get_metrics_dict(self, outputs, batch):
        raise NotImplementedError(NO_TORCH_LOSS)

    def get_loss_dict(self, outputs, batch, metrics_dict=None):
        raise NotImplementedError(NO_TORCH_LOSS)

    @torch.no_grad()
    def get_image_metrics_and_images(self, outputs, batch):
        gt = self.composite_with_background(self.get_gt_img(batch["image"]), outputs["background"])
        pred = outputs["rgb"]
        g, p = gt.permute(2, 0, 1)[None], pred.permute(2, 0, 1)[None]
        metrics = {"psnr": float(self.psnr(g, p).item()), "ssim": float(self.ssim(g, p))}
        if self.lpips is not None:
            metrics["lpips"] = float(self.lpips(g.clamp(0, 1), p.clamp(0, 1)))
        if self.config.color_corrected_metrics:  # splatfacto's: the render colour-matched to the target first
            from nerfstudio.model_components.lib_bilagrid import color_correct

            cc = color_correct(pred, gt).permute(2, 0, 1)[None]
            metrics.update(cc_psnr=float(self.psnr(g, cc).item()), cc_ssim=float(self.ssim(g, cc)))
            if self.lpips is not None:
                metrics["cc_lpips"] = float(self.lpips(g.clamp(0, 1), cc.clamp(0, 1)))
        return metrics, {"img": torch.cat([gt, pred], dim=1)}

    # ------------------------------------------------------------------ checkpoints (`checkpoint.py`)
    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """The Gaussians shown (`checkpoint_entries.entries`; a training pipeline writes its engine's whole
        state instead)."""
        from .checkpoint_entries import entries

        out = {} if destination is None else destination
        out.update(entries(self, prefix=prefix))
        return out

    def load_state_dict(self, state_dict, strict: bool = True, **kwargs):  # type: ignore[override]
        """Show the Gaussians of a checkpoint's model entries (`checkpoint_entries.read`; resuming a
        training state is the pipeline's: `JaxGSPipeline.load_state_dict`)."""
        from .checkpoint_entries import read

        loaded = read(state_dict)
        self.publish(loaded.gaussians, loaded.trained_steps)
