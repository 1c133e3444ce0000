"""Pipeline: owns the JAX training engine (`jax_backend.Trainer`), hands it nerfstudio's cached
training images and cameras once, trains in blocks and publishes the engine's Gaussians to the
model after each (`JaxGSModel.publish`). Its checkpoints hold the engine's whole training state.
nerfstudio's datamanager, eval and viewer code paths stay as they are."""
from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, Type

import numpy as np
import torch

from nerfstudio.pipelines.base_pipeline import VanillaPipeline, VanillaPipelineConfig

from . import checkpoint_entries
from .cameras import camera_model, cameras_to_opencv, training_camera_model
from .checks import check_host_memory, check_scene, check_views
from .errors import InputError, user_errors
from .hooks import (cache_images, install_pipeline_hooks, no_prompts, share_training_cache, take_training_cache,
                    training_views)
from .model import NO_TORCH_LOSS
from .settings import backgrounds, check_datamanager

log = logging.getLogger(__name__)


def build_engine(config, start, dataset, scene_extent: float, max_steps: int, optimizers=None,
                 camera_model: str = "pinhole", datamanager=None, background=None, replicas=None,
                 num_train_data=None):
    """The JAX trainer for the model `config`'s settings, starting from `start` (a
    `checkpoint_entries.Loaded`: the Gaussians, and a checkpoint's whole training state when it
    holds one), on `dataset` (its views drawn as `camera_model`; its images kept where
    `settings.images_place` says, from `datamanager`'s config), for a run ending at step
    `max_steps` (`optimizers`: nerfstudio's `--optimizers` dict), composited on `background`
    (`settings.Backgrounds.training`; None: the config's), on `replicas` data-parallel devices
    (`settings.Machine.replicas`; None: the config's), `num_train_data` the run's training views
    (all hosts'; None: the dataset's)."""
    import jax

    from jax_backend import Trainer

    from .settings import images_place, layout, train_config

    c, resume = config, start if start.training_state is not None else None
    num_train_data = dataset.num_views if num_train_data is None else num_train_data
    if resume is not None:  # before any engine is built for a run it cannot resume
        checkpoint_entries.check_resumable(resume)
    cfg = train_config(c, max_steps=max_steps, num_train_data=num_train_data, optimizers=optimizers,
                       background=background, camera_model=camera_model)
    try:  # the capacity grows on the host as density control needs it
        images, device_bytes = images_place(c, datamanager)
        engine = Trainer(cfg, dataset, start.gaussians, scene_extent, log=print, layout=layout(c, replicas=replicas),
                         views_per_device=c.views_per_device, images=images, device_bytes=device_bytes)
    except ValueError as e:  # the engine's own checks of the settings (views per step against the views)
        raise InputError(f"device settings: {e}") from None
    if engine.images_where == "host":
        why = ("--pipeline.datamanager.cache-images cpu" if images == "host" else
               f"{engine.images_why}: --pipeline.model.device-memory-gb")
        rows = engine.images.rows(c.steps_per_block)
        log.info(f"the {dataset.num_views} training images ({dataset.image_bytes / 2**30:.2f} GiB) stay in host "
                 f"memory ({why}); each block's views ({rows} images at most, "
                 f"{rows * dataset.image_bytes / dataset.num_views / 2**20:.0f} MiB) are copied to the device while the "
                 f"block before trains")
    if engine.views_per_step > 1:
        hosts = f"{engine.layout.processes} process(es) x " if engine.layout.processes > 1 else ""
        log.info(f"data parallel: {hosts}{engine.layout.replicas} device(s) x {c.views_per_device} view(s) "
                 f"per step")
    if engine.layout.tile_devices > 1:
        log.info(f"each view's tiles dealt over {engine.layout.tile_devices} "
                 f"{jax.default_backend().upper()} devices")
    if resume is not None:
        checkpoint_entries.resume(engine, resume)
    return engine


class ViewShare:
    """Some of a dataset's views (this host's share when several train together), as nerfstudio's
    FullImageDatamanager reads a dataset to cache it: `len`, `get_data` and its own copy of the
    cameras, whose intrinsics the cache rewrites when it undistorts."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, [int(i) for i in indices]
        self.cameras = dataset.cameras[torch.tensor(self.indices)]

    def __len__(self) -> int:
        return len(self.indices)

    def get_data(self, index: int, image_type="float32"):
        return self.dataset.get_data(self.indices[index], image_type=image_type)


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
        cache_images(self.datamanager, self.model.config.fisheye)
        self.engine = None  # jax_backend.Trainer, built on first training use (`start_engine`)
        test_mode = kwargs.get("test_mode", args[1] if len(args) > 1 else "val")
        if test_mode == "val":  # training: every image it will read, before any compute
            self._check_views(training=True)
            self._check_host_memory()
        # where training starts (`checkpoint_entries.Loaded`): a new model's Gaussians, init-ply's, or a
        # checkpoint's state (`load_state_dict`); the engine is built from it (`start_engine`)
        self.start = checkpoint_entries.Loaded(self.model.gaussians, 0, None, 1)
        if test_mode == "val" and self.model.config.init_ply is not None:
            self._start_from_ply()
        outputs = getattr(self.datamanager, "train_dataparser_outputs", None)
        alpha_color = getattr(outputs, "alpha_color", None)
        self.backgrounds = backgrounds(self.model.config, None if alpha_color is None else alpha_color.tolist())
        self.model.set_background(torch.tensor(self.backgrounds.rendered))  # what eval and the viewer draw on

    def _start_from_ply(self) -> None:
        """The model's Gaussians from --pipeline.model.init-ply (a checkpoint loaded afterwards,
        on resume, replaces them)."""
        from .initial import gaussians_from_ply

        outputs = self.datamanager.train_dataparser_outputs
        gaussians = gaussians_from_ply(self.model.config, outputs.dataparser_transform.numpy(),
                                       outputs.dataparser_scale)
        self.start = checkpoint_entries.Loaded(gaussians, 0, None, 1)
        self.model.publish(gaussians, 0)
        log.info(f"starting from {int(gaussians.alive.sum())} Gaussians of {self.model.config.init_ply} "
                 f"({self.model.config.init_ply_frame} frame)")

    def _check_host_memory(self) -> None:
        """Before nerfstudio caches any image: they fit in this host's memory (each of several
        processes holds its share of the training views)."""
        import jax

        dm = self.datamanager
        processes = jax.process_count() if jax.distributed.is_initialized() else 1
        check_host_memory(dm.train_dataset, dm.eval_dataset, share=1 / processes)

    def _check_views(self, training: bool) -> None:
        dm = self.datamanager
        with user_errors("checking the scene's images"):
            if training:
                check_views(dm.train_dataset, "training", self.model.config.fisheye)
            if dm.eval_dataset is not None and len(dm.eval_dataset):
                check_views(dm.eval_dataset, "evaluation")
        if training and not (dm.eval_dataset is not None and len(dm.eval_dataset)):
            log.info(f"the scene's {len(dm.train_dataset)} images all train: no evaluation views, so the run "
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

    def start_engine(self, max_steps: int, optimizers=None, replicas=None):
        """Build the on-device dataset and the engine, once, for a run ending at step `max_steps`
        (`optimizers`: nerfstudio's `--optimizers` dict) on `replicas` data-parallel devices
        (`settings.Machine.replicas`; None: the model's num-devices): the trainer's first act;
        viewing and export never build one. Blocks then run on it (`train_block`); a second call returns it."""
        if self.engine is not None:
            return self.engine
        import jax

        from jax_backend import host_views, make_dataset, scene_extent

        dm = self.datamanager
        full = dm.train_dataset
        viewmats, _, _, _ = cameras_to_opencv(full.cameras)
        extent = max(scene_extent(viewmats), 1e-3)  # of every host's cameras: the same on each
        mine, share = np.arange(len(full)), None
        if jax.process_count() > 1:  # several processes: each reads and trains on its share of the views
            mine = host_views(len(full))
            log.info(f"process {jax.process_index()} of {jax.process_count()}: training on {len(mine)} of "
                     f"{len(full)} views")
            share = ViewShare(full, mine)
        with training_views(dm, share) as views:
            with user_errors("reading the training images"):
                # uint8 images, undistorted unless drawn natively (which rewrites their intrinsics)
                cached = take_training_cache(dm)
            _, Ks, _, _ = cameras_to_opencv(views.cameras)
            fisheye = self.model.config.fisheye
            model = training_camera_model(views.cameras, fisheye, lambda i: f"training view {i}")
            distortions = np.stack([camera_model(views.cameras, i, fisheye)[1] for i in range(len(views))])
        if not cached:
            raise RuntimeError("the dataset has no training images")
        # the images held once: nerfstudio's cache let go, each view freed as make_dataset copies it
        images = [np.asarray(d["image"].cpu().numpy()) for d in cached]
        masks = [np.asarray(d["mask"].cpu().numpy())[..., 0] for d in cached] if "mask" in cached[0] else None
        sizes = [im.shape[:2] for im in images]
        del cached
        viewmats = viewmats[mine]
        data = make_dataset(images, viewmats, Ks, masks, distortions, on_device=False, release=True)
        log.info(f"{data.num_views} training images of up to {data.width}x{data.height} read: "
                 f"{data.image_bytes / 2**30:.2f} GiB of host memory")
        share_training_cache(dm, [data.images[i, :h, :w] for i, (h, w) in enumerate(sizes)])
        if model == "fisheye":
            log.info(f"training the {len(sizes)} fisheye views as fisheyes, on their whole frames "
                     f"(--pipeline.model.fisheye native)")
        self.engine = build_engine(self.model.config, self.start, data, extent, max_steps, optimizers, model,
                                   dm.config, background=self.backgrounds.training, replicas=replicas,
                                   num_train_data=len(full))
        self.start = None  # in the engine now
        self._publish()
        return self.engine

    def _publish(self) -> None:
        """The engine's Gaussians, steps and pose corrections shown by the model."""
        cameras = self.engine.cameras
        self.model.publish(self.engine.kept_gaussians(), self.engine.step, None if cameras is None else cameras.deltas)

    # ------------------------------------------------------------------ checkpoints (`checkpoint.py`)
    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """nerfstudio's, with the model's entries from `checkpoint_entries.entries`: the engine's whole
        training state (Adam's moments, statistics, pose corrections) once training has built it,
        else the Gaussians the model shows."""
        out = OrderedDict() if destination is None else destination
        self._save_to_state_dict(out, prefix, keep_vars)
        for name, child in self.named_children():
            if name != "_model":
                child.state_dict(destination=out, prefix=f"{prefix}{name}.", keep_vars=keep_vars)
        out.update(checkpoint_entries.entries(self.model, self.engine, prefix=f"{prefix}_model."))
        return out

    def load_state_dict(self, state_dict, strict=None):
        """A checkpoint's state (`checkpoint_entries.read`): the model shows its Gaussians, and training
        starts from it (the engine built from it by `start_engine`, or given it when built already)."""
        model = "_model."
        loaded = checkpoint_entries.read({k[len(model):]: v for k, v in state_dict.items() if k.startswith(model)})
        torch.nn.Module.load_state_dict(self, {k: v for k, v in state_dict.items() if not k.startswith(model)},
                                        strict=False)
        self.model.publish(loaded.gaussians, loaded.trained_steps)
        if self.engine is None:
            self.start = loaded
        elif loaded.training_state is not None:
            checkpoint_entries.resume(self.engine, loaded)
            self._publish()

    def get_train_loss_dict(self, step: int):
        raise NotImplementedError(NO_TORCH_LOSS)

    def get_eval_loss_dict(self, step: int):
        raise NotImplementedError(NO_TORCH_LOSS)

    def make_snapshots(self, out_dir):
        """`jax_backend.Snapshots` as the model's `snapshot_every` asks (None when 0), previewing
        the first evaluation view (the first training view when there is none, or when it draws
        with another camera model than the training views: the preview draws as they do)."""
        every = self.model.config.snapshot_every
        if every <= 0:
            return None
        from jax_backend import Snapshots

        dm, fisheye = self.datamanager, self.model.config.fisheye
        trains_as = training_camera_model(dm.train_dataset.cameras, fisheye, lambda i: f"training view {i}")
        if dm.eval_dataset and camera_model(dm.eval_dataset.cameras, 0, fisheye)[0] == trains_as:
            dataset = dm.eval_dataset
            with user_errors("reading the evaluation images"):
                getattr(dm, "cached_eval", None)  # undistorts them now: the preview takes the intrinsics after it
        else:
            dataset = dm.train_dataset  # cached (undistorted) when the engine was built
        viewmats, Ks, widths, heights = cameras_to_opencv(dataset.cameras[0:1])
        distortion = camera_model(dataset.cameras, 0, fisheye)[1]
        return Snapshots(out_dir, every, (viewmats[0], Ks[0], int(widths[0]), int(heights[0]), distortion),
                         background=np.asarray(self.backgrounds.rendered, np.float32))

    def snapshot(self, snapshots) -> None:
        """The engine's state to `snapshots` (`make_snapshots`'s) when one is due."""
        snapshots(self.engine)

    def rays_per_step(self) -> int:
        """The pixels a training step renders (nerfstudio's rays per batch, times the step's views)."""
        return self.datamanager.get_train_rays_per_batch() * self.engine.views_per_step

    def time_live_renders(self, rendered) -> None:
        """While this process trains: each of the viewer's renders drawn on one device and its
        seconds told to `rendered` (the trainer's `viewer.LiveView`)."""
        self.model.view_timer = rendered

    def train_block(self, num_steps: int, max_steps: int, publish_lock=None) -> Dict[str, float]:
        """Run one compiled block. The model keeps serving the previous Gaussians (immutable JAX
        arrays) to the viewer while the block runs; only switching to the new ones happens under
        `publish_lock` (nerfstudio's train lock), so a viewer render waits at most for that."""
        engine = self.engine
        if engine is None:
            raise RuntimeError("train_block before start_engine: the engine is built once, by start_engine")
        metrics, info = engine.run_block(num_steps)
        with publish_lock if publish_lock is not None else contextlib.nullcontext():
            self._publish()
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
