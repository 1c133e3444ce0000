"""Pipeline: hands nerfstudio's cached training images and cameras to the JAX engine once, then
trains in blocks. nerfstudio's datamanager, eval and viewer code paths stay as they are."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Dict, Type

import numpy as np

from nerfstudio.pipelines.base_pipeline import VanillaPipeline, VanillaPipelineConfig

from .bridge import cameras_to_opencv
from .checks import check_scene, check_views
from .errors import InputError, user_errors
from .hooks import install_pipeline_hooks, no_prompts
from .settings import check_datamanager


@dataclass
class JaxGSPipelineConfig(VanillaPipelineConfig):
    _target: Type = field(default_factory=lambda: JaxGSPipeline)


class JaxGSPipeline(VanillaPipeline):
    def __init__(self, config: JaxGSPipelineConfig, *args, **kwargs):
        install_pipeline_hooks()  # every change jax-gs makes to nerfstudio and the process: `hooks.py`
        dm = config.datamanager
        data = getattr(dm, "data", None) or dm.dataparser.data
        check_scene(dm.dataparser, data)
        check_datamanager(dm)
        with no_prompts(), user_errors(f"loading the scene {data}"):
            super().__init__(config, *args, **kwargs)
        test_mode = kwargs.get("test_mode", args[1] if len(args) > 1 else "val")
        if test_mode == "val":  # training: every image it will read, before any compute
            self._check_views(training=True)
            if self.model.config.init_ply is not None:
                self._start_from_ply()
        outputs = getattr(self.datamanager, "train_dataparser_outputs", None)
        self.model.set_data_background(getattr(outputs, "alpha_color", None))

    def _start_from_ply(self) -> None:
        """The model's Gaussians from --pipeline.model.init-ply (a checkpoint loaded afterwards,
        on resume, replaces them)."""
        from .settings import gaussians_from_ply

        outputs = self.datamanager.train_dataparser_outputs
        gaussians = gaussians_from_ply(self.model.config, outputs.dataparser_transform.numpy(),
                                       outputs.dataparser_scale)
        self.model.gaussians = gaussians
        self.model._view_cache = None
        print(f"[jax-gs] starting from {int(gaussians.alive.sum())} Gaussians of {self.model.config.init_ply} "
              f"({self.model.config.init_ply_frame} frame)")

    def _check_views(self, training: bool) -> None:
        dm = self.datamanager
        with user_errors("checking the scene's images"):
            if training:
                check_views(dm.train_dataset, "training")
            if dm.eval_dataset is not None and len(dm.eval_dataset):
                check_views(dm.eval_dataset, "evaluation")
        if training and not (dm.eval_dataset is not None and len(dm.eval_dataset)):
            print(f"[jax-gs] the scene's {len(dm.train_dataset)} images all train: no evaluation views, so the run "
                  f"skips evaluation (ns-eval has nothing to measure; the dataparser's --eval-mode and its "
                  f"train-split settings choose the views held out)")

    def get_average_eval_image_metrics(self, *args, **kwargs):
        """nerfstudio's (ns-eval), after checking there are evaluation views and their images read."""
        dm = self.datamanager
        if dm.eval_dataset is None or not len(dm.eval_dataset):
            raise InputError(f"the scene {dm.config.data} has no evaluation views (all "
                             f"{len(dm.train_dataset)} images train): nothing for ns-eval to measure")
        self._check_views(training=False)
        return super().get_average_eval_image_metrics(*args, **kwargs)

    def ensure_engine(self, max_steps: int, optimizers=None):
        """Build the on-device dataset and the engine on first use (not for viewing or export),
        for a run ending at step `max_steps`; `optimizers`: nerfstudio's `--optimizers` dict."""
        model = self.model
        if model.engine is not None:
            return model.engine
        from jax_backend import make_dataset, scene_extent

        dm = self.datamanager
        with user_errors("reading the training images"):
            cached = dm.cached_train  # undistorted uint8 images; rewrites the cameras' intrinsics
        if not cached:
            raise RuntimeError("the dataset has no training images")
        images = [np.asarray(d["image"].cpu().numpy()) for d in cached]
        masks = None
        if "mask" in cached[0]:
            masks = [np.asarray(d["mask"].cpu().numpy())[..., 0].astype(bool) for d in cached]
        viewmats, Ks, _, _ = cameras_to_opencv(dm.train_dataset.cameras)
        data = make_dataset(images, viewmats, Ks, masks)
        model.attach_engine(data, max(scene_extent(viewmats), 1e-3), max_steps, optimizers)
        return model.engine

    def make_snapshots(self, out_dir):
        """`jax_backend.Snapshots` as the model's `snapshot_every` asks (None when 0), previewing
        the first evaluation view (the first training view when there is none)."""
        every = self.model.config.snapshot_every
        if every <= 0:
            return None
        from jax_backend import Snapshots

        dm = self.datamanager
        if dm.eval_dataset:
            dataset = dm.eval_dataset
            with user_errors("reading the evaluation images"):
                getattr(dm, "cached_eval", None)  # undistorts them now: the preview takes the intrinsics after it
        else:
            dataset = dm.train_dataset  # cached (undistorted) when the engine was built
        viewmats, Ks, widths, heights = cameras_to_opencv(dataset.cameras[0:1])
        return Snapshots(out_dir, every, (viewmats[0], Ks[0], int(widths[0]), int(heights[0])),
                         background=self.model.background_color.numpy())

    def train_block(self, num_steps: int, max_steps: int, publish_lock=None) -> Dict[str, float]:
        """Run one compiled block. The model keeps serving the previous Gaussians (immutable JAX
        arrays) to the viewer while the block runs; only switching to the new ones happens under
        `publish_lock` (nerfstudio's train lock), so a viewer render waits at most for that."""
        engine = self.ensure_engine(max_steps)
        metrics, info = engine.run_block(num_steps)
        with publish_lock if publish_lock is not None else contextlib.nullcontext():
            self.model._sync_from_engine()
        out = {
            "loss": float(np.mean(metrics["loss"])),
            "psnr": float(np.mean(metrics["psnr"])),
            "gaussian_count": int(metrics["num_alive"]),
            "intersections": float(np.mean(metrics["num_intersections"])),
        }
        if info.refined:
            out.update(clone=info.n_clone, split=info.n_split, pruned=info.n_pruned, relocated=info.n_relocated,
                       added=info.n_added)
        return out
