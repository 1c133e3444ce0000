"""Every change jax-gs makes to nerfstudio or to the process, in one place. Each is installed once
(installing it again changes nothing), says why, and acts on jax-gs's runs alone; nothing else in
the plugin patches anything.

A jax-gs run (`jaxgs_run`): a process that built a jax-gs pipeline, or whose command line names a
jax-gs method (`ns-train jax-gs ...`) or a `--load-config` of a jax-gs run (its method folder,
`outputs/SCENE/jax-gs/TIMESTAMP/config.yml`, read when the file is missing).

At the import of the method config (`config.py`: every ns-* command imports it, whichever method):
- `sys.excepthook` (`install_excepthook`): in a jax-gs run, an InputError, a jax_backend error
  meant for users, a missing `--load-config`, a full disk or a checkpoint torch cannot read is
  printed as one line (`jax-gs: error: ...`, the wording in `errors.one_line`); anything else, and
  every error of another method's run (splatfacto's, nerfacto's), goes to the hook that was there
  before. Installed at import so that a bad `--load-config` of a jax-gs run is one line too.
- jax-gs's progress (`install_progress_lines`): the `logging` records of `jax_backend` and
  `nerfstudio_jaxgs`, INFO and up, printed as `[jax-gs] ...` lines on stdout (no other logger is
  touched; `logging.getLogger("jax_backend").setLevel(...)` quiets or widens them).

When ns-train saves a jax-gs run's config (`install_one_process_launch`, from
`JaxGSTrainerConfig.save_config`, which nerfstudio's `main` calls just before its `launch`):
- nerfstudio's `launch` runs a jax-gs run in this one process, not N torch DDP processes or a
  torch process group: the trainer reads the `--machine.*` flags, left as given, as JAX devices
  and JAX's multi-host runtime (`settings.machine`). Other methods' launches are left as they are.

When a jax-gs pipeline is built (`install_pipeline_hooks`, from `JaxGSPipeline.__init__`: ns-train,
ns-viewer, ns-export, ns-eval and ns-render of a jax-gs config; never for another method):
- the process is marked a jax-gs run (the excepthook above acts from then on).
- On a host with no GPU or TPU device, JAX starts its CPU backend only
  (`jax_backend.skip_absent_accelerators`): the CUDA and TPU plugins the `[gpu]`/`[tpu]` extras
  install are not initialised, so they print no traceback or warnings the user did not cause.
  Before JAX starts its backends; left alone when the user set JAX_PLATFORMS.
- JAX's persistent compilation cache (`jax_backend.enable_compilation_cache`): every ns-* command
  loads the programs an earlier run compiled instead of compiling them again.
- JAX takes GPU memory as it needs it (`jax_backend.share_gpu_memory`:
  XLA_PYTHON_CLIENT_PREALLOCATE=false), not 75% of the GPU at start: nerfstudio keeps its images
  and cameras on the same GPU with torch. Before JAX starts its backends; left alone when the user
  set any XLA_PYTHON_CLIENT_* variable.
- On a CPU, one JAX device per core and a spare (`jax_backend.use_cpu_cores`): training deals
  each view's tiles over the cores; the spare lets a viewer render start while a block trains.
  Before JAX starts its backends; an XLA_FLAGS device count is left alone.
- `ExportGaussianSplat.write_ply` (ns-export only) becomes `export.write_ply_atomic`: the output
  folder checked, temporary files of a killed export removed, the same bytes written to a
  temporary file and renamed, so an interrupted export leaves the earlier PLY as it was.
- `ns-export tsdf` on a jax-gs pipeline (ns-export only; `install_mesh_export`): its renders come
  from `export.camera_renders`, camera by camera (nerfstudio's `render_trajectory` asks for ray
  bundles, which a splat model does not draw; the depth handed over is the distance along each
  ray, as the TSDF reads it), and its NeRF texturing step (`--texture-method nerf`, the default,
  again ray bundles) is skipped with one line: the mesh keeps the TSDF's vertex colours. Other
  methods' exports are left as they are.
- `RenderStateMachine.run` (the thread that renders a viewer client's views, started once the
  viewer is up, after the pipeline) runs inside `render_places.live_render`: a jax-gs model asks
  `in_live_render` to draw it on one device while a block trains, and to time it (other models
  never ask).
- `Viewer.init_scene` gains `viewer.move_to_a_training_camera_if_blind` on each browser's
  connection: a jax-gs scene's viewer opens at a training camera when its default camera sees
  nothing (forward-facing captures). Other methods' viewers are left as they are.

Once the pipeline is built, on its datamanager (`cache_images`, from `JaxGSPipeline.__init__`):
- nerfstudio's FullImageDatamanager undistorts, while it caches (`_load_images`, behind its
  cached_train and cached_eval), every camera whose distortion parameters are not all zero; the
  fisheyes jax-gs draws natively (`cameras.keeps_its_image`) read zero coefficients while it caches
  and theirs again after, so their images are cached as they are on disk.
- The training images are cached in host memory whatever --pipeline.datamanager.cache-images says:
  the engine decides where they go (`jax_backend.Trainer`'s `images`), and torch never holds them
  on a GPU next to JAX's copy. With cache-images cpu on a machine without CUDA, the evaluation
  images are cached without pinning them (torch cannot pin memory without an NVIDIA driver).

While the engine reads the training images, with several processes (`training_views`, a context
manager, from `JaxGSPipeline.start_engine`):
- the datamanager's `train_dataset` is this host's share of the views (`pipeline.ViewShare`), so
  its cache reads and undistorts only those; its own dataset again afterwards, whose cameras then
  take the share's intrinsics after undistortion (as nerfstudio keeps them for the views it caches).

When the engine has read the training images (`take_training_cache`, `share_training_cache`,
from `JaxGSPipeline.start_engine`):
- nerfstudio's cached training images (its `cached_train`, a cached property) are taken from the
  datamanager, so that each view is freed as the engine copies it (the images held once), and the
  cache is then set to views of the engine's host copy (nerfstudio still reads image sizes from it).

While the pipeline is built (`no_prompts`, a context manager: undone afterwards):
- rich's `Confirm.ask` returns its default, saying so, when stdin is not a terminal (nerfstudio's
  questions would otherwise wait for an answer nobody can give); "downscale the images?" is an
  InputError naming the flag.
"""
from __future__ import annotations

import contextlib
import logging
import re
import sys

from .errors import InputError, one_line

log = logging.getLogger(__name__)

_MARK = "_jaxgs"  # set on every function jax-gs installed, so installing again changes nothing


def _ours(fn) -> bool:
    return getattr(fn, _MARK, False)


def _mark(fn):
    setattr(fn, _MARK, True)
    return fn


_run = {"jaxgs": False}  # set when a jax-gs pipeline is built in this process


def _jaxgs_methods() -> set:
    """The method names jax-gs registers with nerfstudio (its `nerfstudio.method_configs` entry
    points, pyproject.toml)."""
    from importlib.metadata import entry_points

    return {e.name for e in entry_points(group="nerfstudio.method_configs") if e.value.startswith(__package__ + ".")}


def jaxgs_run(argv=None) -> bool:
    """Whether this process runs jax-gs (module docstring): a jax-gs pipeline was built, or
    `argv` (default sys.argv) names a jax-gs method or a --load-config of a jax-gs run."""
    if _run["jaxgs"]:
        return True
    from pathlib import Path

    argv = list(sys.argv if argv is None else argv)
    methods = _jaxgs_methods()
    if len(argv) > 1 and argv[1] in methods:  # ns-train METHOD ...
        return True
    for i, arg in enumerate(argv):
        path = arg.split("=", 1)[1] if arg.startswith("--load-config=") else (
            argv[i + 1] if arg == "--load-config" and i + 1 < len(argv) else None)
        if path is None:
            continue
        config = Path(path)
        if config.is_file():  # nerfstudio writes the method's name into its config.yml
            try:
                return re.search(r"^method_name: (\S+)$", config.read_text(), re.M)[1] in methods
            except (OSError, UnicodeDecodeError, TypeError):  # unreadable, or no method name: its folders below
                pass
        return any(part in methods for part in config.parts)  # outputs/SCENE/METHOD/TIMESTAMP/config.yml
    return False


class _ProgressLines(logging.StreamHandler):
    """`[jax-gs] message` lines on the stdout of the moment (so a captured stdout gets them too)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("[jax-gs] %(message)s"))

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, _):
        pass


def install_progress_lines() -> None:
    """jax-gs's progress records printed (see the module docstring)."""
    for name in ("jax_backend", "nerfstudio_jaxgs"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, _ProgressLines) for h in logger.handlers):
            logger.addHandler(_ProgressLines())
            logger.setLevel(logging.INFO)
            logger.propagate = False


def install_excepthook() -> None:
    """In a jax-gs run, one line for errors meant for the user; the previous hook for everything
    else, and for every error of another method's run."""
    if _ours(sys.excepthook):
        return
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        line = one_line(exc_type, exc, tb) if jaxgs_run() else None
        if line is None:
            return previous(exc_type, exc, tb)
        sys.stderr.write(f"jax-gs: error: {line}\n")
        sys.stderr.flush()

    sys.excepthook = _mark(hook)


def install_atomic_export() -> None:
    """In ns-export (its module loaded), `ExportGaussianSplat.write_ply` as `write_ply_atomic`."""
    exporter = sys.modules.get("nerfstudio.scripts.exporter")
    if exporter is None or _ours(exporter.ExportGaussianSplat.write_ply):
        return
    from .export import write_ply_atomic

    exporter.ExportGaussianSplat.write_ply = staticmethod(_mark(write_ply_atomic))


def _is_jaxgs(pipeline) -> bool:
    """A pipeline whose model is jax-gs's (any of its methods)."""
    from .model import JaxGSModel

    return isinstance(getattr(pipeline, "model", None), JaxGSModel)


def install_mesh_export() -> None:
    """In ns-export (its modules loaded): `ns-export tsdf` of a jax-gs pipeline renders by camera
    and keeps the TSDF's vertex colours (see the module docstring)."""
    tsdf = sys.modules.get("nerfstudio.exporter.tsdf_utils")
    texture = sys.modules.get("nerfstudio.exporter.texture_utils")
    if tsdf is None or texture is None or _ours(tsdf.render_trajectory):
        return
    from .export import camera_renders

    trajectory, textured = tsdf.render_trajectory, texture.export_textured_mesh

    def render_trajectory(pipeline, *args, **kwargs):
        return (camera_renders if _is_jaxgs(pipeline) else trajectory)(pipeline, *args, **kwargs)

    def export_textured_mesh(mesh, pipeline, output_dir, *args, **kwargs):
        if not _is_jaxgs(pipeline):
            return textured(mesh, pipeline, output_dir, *args, **kwargs)
        log.info(f"{output_dir}/tsdf_mesh.ply keeps the TSDF's vertex colours: NeRF texturing "
                 "(--texture-method nerf) renders ray bundles, which a splat model does not draw")

    tsdf.render_trajectory = _mark(render_trajectory)
    texture.export_textured_mesh = _mark(export_textured_mesh)


def install_first_view() -> None:
    """nerfstudio's `Viewer.init_scene`, then the first-view check on each client's connection."""
    from nerfstudio.viewer.viewer import Viewer

    if _ours(Viewer.init_scene):
        return
    original = Viewer.init_scene

    def init_scene(self, *args, **kwargs):
        original(self, *args, **kwargs)
        from .viewer import watch_first_views

        watch_first_views(self)

    Viewer.init_scene = _mark(init_scene)


def install_live_renders() -> None:
    """nerfstudio's viewer render threads (`RenderStateMachine.run`: each client's thread, which
    renders its views) run inside `live_render` (see the module docstring)."""
    from nerfstudio.viewer.render_state_machine import RenderStateMachine

    from .render_places import live_render

    if _ours(RenderStateMachine.run):
        return
    original = RenderStateMachine.run

    def run(self, *args, **kwargs):
        with live_render():
            return original(self, *args, **kwargs)

    RenderStateMachine.run = _mark(run)


def install_one_process_launch() -> None:
    """In ns-train (its module loaded), nerfstudio's `launch` of a jax-gs run: one process (see the
    module docstring)."""
    train = sys.modules.get("nerfstudio.scripts.train")
    if train is None or not hasattr(train, "launch") or _ours(train.launch):
        return
    original = train.launch

    def launch(main_func, num_devices_per_machine, num_machines=1, machine_rank=0, dist_url="auto", config=None,
               **kwargs):
        if type(config).__module__.startswith(__package__ + "."):  # a jax-gs trainer config
            num_devices_per_machine, num_machines, machine_rank = 1, 1, 0  # JAX's devices and hosts, not DDP's
        return original(main_func, num_devices_per_machine, num_machines, machine_rank, dist_url, config, **kwargs)

    train.launch = _mark(launch)


def install_pipeline_hooks() -> None:
    """Everything a jax-gs pipeline needs, once per process (see the module docstring)."""
    from jax_backend import enable_compilation_cache, share_gpu_memory, skip_absent_accelerators, use_cpu_cores

    _run["jaxgs"] = True
    install_excepthook()
    install_progress_lines()
    skip_absent_accelerators()  # first: nothing below may start a JAX backend before these
    share_gpu_memory()
    enable_compilation_cache()
    use_cpu_cores()
    install_atomic_export()
    install_mesh_export()
    install_first_view()
    install_live_renders()


def cache_images(datamanager, fisheye: str) -> None:
    """Make nerfstudio's FullImageDatamanager cache the images as jax-gs needs them (module
    docstring): the training images in host memory, and natively drawn fisheyes as they are on
    disk (their intrinsics stay the capture's)."""
    import torch

    from .cameras import keeps_its_image

    load = datamanager._load_images
    if _ours(load):
        return

    def loading(split, cache_images_device=None):
        device = cache_images_device or datamanager.config.cache_images
        cams = (datamanager.train_dataset if split == "train" else datamanager.eval_dataset).cameras
        keep = [i for i in range(len(cams)) if keeps_its_image(cams, i, fisheye)]
        saved = cams.distortion_params  # often one row expanded over the views: replaced, not written
        if keep:
            zeroed = saved.clone()
            zeroed[torch.tensor(keep)] = 0.0
            cams.distortion_params = zeroed
        try:
            if split == "train" or (device == "cpu" and not torch.cuda.is_available()):
                return on_host(split, device)
            return load(split, cache_images_device=device)
        finally:
            cams.distortion_params = saved

    def on_host(split, device):  # nerfstudio's "gpu" caching onto the CPU device: no pinned copy
        torch_device = datamanager.device
        datamanager.device = "cpu"
        try:
            return load(split, cache_images_device="gpu")
        finally:
            datamanager.device = torch_device
            if split == "train":  # where nerfstudio's own caching leaves its training cameras
                cameras = datamanager.train_dataset.cameras
                datamanager.train_cameras = cameras.to(torch_device) if device == "gpu" else cameras

    datamanager._load_images = _mark(loading)


@contextlib.contextmanager
def training_views(datamanager, share=None):
    """While active, `datamanager.train_dataset` is `share` (a `pipeline.ViewShare`: this host's
    views; None: the whole dataset, nothing changed), which it yields; afterwards its own dataset
    again, whose cameras take the share's intrinsics after undistortion (module docstring)."""
    full = datamanager.train_dataset
    if share is None:
        yield full
        return
    import torch

    datamanager.train_dataset = share  # what nerfstudio's cache reads (and undistorts)
    try:
        yield share
    finally:
        datamanager.train_dataset = full
    at = torch.tensor(share.indices)
    for name in ("fx", "fy", "cx", "cy", "width", "height"):
        getattr(full.cameras, name)[at] = getattr(share.cameras, name)


def take_training_cache(datamanager) -> list:
    """nerfstudio's cached training images (read now if not yet), let go by the datamanager: the
    caller holds the only reference (see the module docstring)."""
    cached = datamanager.cached_train
    datamanager.__dict__.pop("cached_train", None)
    return cached


def share_training_cache(datamanager, images) -> None:
    """nerfstudio's training cache as `images` ([H, W, C] uint8 numpy views of the engine's copy)."""
    import torch

    datamanager.__dict__["cached_train"] = [{"image": torch.from_numpy(im)} for im in images]


@contextlib.contextmanager
def no_prompts():
    """While active, rich's Confirm.ask returns its default when stdin is not a terminal."""
    from rich.prompt import Confirm

    interactive = sys.stdin is not None and sys.stdin.isatty()
    if interactive:
        yield
        return
    original = Confirm.ask

    def ask(prompt="", *args, default=False, **kwargs):
        if "downscale the images" in str(prompt):  # nerfstudio would exit(1) without a word on "no"
            raise InputError("the downscaled images the dataparser's --downscale-factor asks for do not exist "
                             "(nerfstudio offers to make them when run in a terminal; or use ns-process-data, or "
                             "leave out --downscale-factor)")
        sys.stderr.write(f"jax-gs: non-interactive run, answering {'yes' if default else 'no'} to: {prompt}\n")
        return bool(default) if default is not ... else False

    Confirm.ask = ask
    try:
        yield
    finally:
        Confirm.ask = original
