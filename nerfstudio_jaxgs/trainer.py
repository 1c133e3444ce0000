"""Trainer: nerfstudio's, except that one iteration runs a whole compiled block of steps and no
torch backward happens. Step counts, logs, eval, checkpoints (written atomically) and the viewer
follow the block: anything due at a step inside a block runs right after it. Stopping and resuming
a run (Ctrl-C, SIGTERM, --load-dir, the resume command) are `resume.py`'s."""
from __future__ import annotations

import contextlib
import logging
import sys
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Type

import torch
from nerfstudio.engine.trainer import Trainer, TrainerConfig
from nerfstudio.utils import writer
from nerfstudio.utils.decorators import check_main_thread, check_viewer_enabled
from nerfstudio.utils.writer import EventName

from jax_backend.files import atomic_open, remove_stale_temps
from jax_backend.training.schedule import crossed  # light: no JAX import at config time

from .errors import InputError
from .hooks import install_one_process_launch
from .resume import SIGNALS, Interrupts, resolve_load_dir, resume_command, say_last
from .settings import machine
from .viewer import LiveView

log = logging.getLogger(__name__)


@dataclass
class JaxGSTrainerConfig(TrainerConfig):
    """nerfstudio's trainer config. Its `--machine.*` flags are read as `settings.machine` says
    (one process per host, JAX's devices and multi-host runtime, never torch's DDP): ns-train's
    `launch` runs this one process (`hooks.install_one_process_launch`), and no flag is rewritten."""

    _target: Type = field(default_factory=lambda: JaxGSTrainer)

    @property
    def main_process(self) -> bool:
        """Whether this process writes the config, checkpoints, logs and the viewer: the only one,
        or process 0 of several (with --machine.dist-url auto, not known until JAX has started)."""
        from jax_backend.training.distributed import started_process_index

        rank = machine(self.machine, self.pipeline.model).process_id
        return (started_process_index() if rank is None else rank) == 0

    def save_config(self) -> None:
        """nerfstudio's, by process 0 alone (a rank JAX has not given yet: once it has,
        `JaxGSTrainer`). ns-train saves the config just before its `launch`: the hook that makes
        that launch one process is installed here."""
        install_one_process_launch()
        if self.main_process:
            super().save_config()

    def is_viewer_enabled(self) -> bool:
        return self.main_process and super().is_viewer_enabled()

    def is_viewer_legacy_enabled(self) -> bool:
        return self.main_process and super().is_viewer_legacy_enabled()

    def is_tensorboard_enabled(self) -> bool:
        return self.main_process and super().is_tensorboard_enabled()

    def is_wandb_enabled(self) -> bool:
        return self.main_process and super().is_wandb_enabled()

    def is_comet_enabled(self) -> bool:
        return self.main_process and super().is_comet_enabled()


class JaxGSTrainer(Trainer):
    def __init__(self, config: JaxGSTrainerConfig, local_rank: int = 0, world_size: int = 1) -> None:
        self.machine = machine(config.machine, config.pipeline.model)  # the machine flags, resolved once
        m = self.machine
        if m.processes > 1:  # before anything touches a JAX device
            from jax_backend.training.distributed import initialize

            initialize(m.coordinator, m.processes, m.process_id)
            if m.process_id is None:  # --machine.dist-url auto: JAX found the rank
                config.save_config()  # ns-train's save came before the rank was known
        if not config.main_process:  # process 0 prints the progress and keeps the viewer
            config = dataclasses.replace(
                config, logging=dataclasses.replace(config.logging, local_writer=dataclasses.replace(
                    config.logging.local_writer, enable=False)),
                viewer=dataclasses.replace(config.viewer, quit_on_train_completion=True))
        super().__init__(config, local_rank, world_size)

    @check_viewer_enabled
    def _update_viewer_state(self, step: int) -> None:
        """After each block: the viewer's step, and the clients' views re-rendered with the new
        Gaussians when `LiveView` says so (nerfstudio's legacy viewer: its own rule)."""
        viewer = self.viewer_state
        if viewer is None or not hasattr(viewer, "render_statemachines"):
            return super()._update_viewer_state(step)
        while time.time() - viewer.last_move_time < 0.1:  # as nerfstudio: a moving camera comes first
            time.sleep(0.05)
        live = getattr(self, "_live_view", None)
        if live is None:
            live = self._live_view = LiveView()
            self.pipeline.time_live_renders(live.rendered)
        try:
            live.after_block(viewer, step, time.monotonic())
        except RuntimeError:  # as nerfstudio: a viewer hiccup does not stop training
            time.sleep(0.03)

    def _load_checkpoint(self) -> None:
        """nerfstudio's, after checking what `--load-dir`/`--load-checkpoint` point at."""
        c = self.config
        if c.load_dir is not None:
            c.load_dir, c.load_step = resolve_load_dir(c.load_dir, c.load_step)
        elif c.load_checkpoint is not None and not Path(c.load_checkpoint).is_file():
            raise InputError(f"--load-checkpoint {c.load_checkpoint} does not exist")
        super()._load_checkpoint()

    def train(self) -> None:
        assert self.pipeline.datamanager.train_dataset is not None, "Missing DatsetInputs"
        main = self.config.main_process
        if main and hasattr(self.pipeline.datamanager, "train_dataparser_outputs"):
            self.pipeline.datamanager.train_dataparser_outputs.save_dataparser_transform(
                self.base_dir / "dataparser_transforms.json")
        self._init_viewer_state()
        if main:
            remove_stale_temps(self.base_dir, "step-*.ckpt")  # from a run killed while saving
        model = self.pipeline.model
        block = max(1, model.config.steps_per_block)
        done = self._start_step  # steps already trained
        end = self._start_step + self.config.max_num_iterations
        self.stop_training = False
        with self.train_lock:
            self.pipeline.start_engine(end, self.config.optimizers, self.machine.replicas)
        snapshots = self.pipeline.make_snapshots(self.base_dir / "snapshots") if main else None
        try:
            with Interrupts() as interrupts:
                log.info(f"training steps {done + 1}-{end} in blocks of {block} (Ctrl-C stops after the block "
                         f"under way and saves a checkpoint)")
                done = self._train_blocks(done, end, block, snapshots, interrupts)
                if interrupts.signal is not None and done < end:
                    self._stop_saving(interrupts.signal, done, end)  # raises SystemExit
                if interrupts.signal is not None:  # the last block ended: a finished run, not kept open
                    self.config.viewer.quit_on_train_completion = True
        except BaseException:
            if snapshots is not None:
                with contextlib.suppress(Exception):  # the error under way is the one to report
                    snapshots.close()
            raise
        if snapshots is not None:
            snapshots.close()  # waits for the last writes; raises if one failed
        self._after_train()
        if self.config.viewer.quit_on_train_completion:
            self._stop_viewer_renders()

    def _stop_viewer_renders(self, timeout: float = 60.0) -> None:
        """Before the process exits: the viewer's render threads told to stop and waited for, so
        that none is inside a JAX call when the interpreter shuts down (a daemon thread's render
        under way at exit aborted the process: "terminate called without an active exception")."""
        machines = list(getattr(self.viewer_state, "render_statemachines", {}).values())
        for m in machines:
            m.running = False
            m.render_trigger.set()
        for m in machines:
            if m.is_alive():
                m.join(timeout)

    def _stop_saving(self, signum: int, done: int, end: int) -> None:
        """After a Ctrl-C or SIGTERM: a checkpoint of the `done` steps reached (unless this run
        trained none), one line naming it and the command that resumes, and exit 128 + signum."""
        what = SIGNALS[signum]
        if not self.config.main_process:
            import jax

            say_last(f"jax-gs: process {jax.process_index()} stopped by {what} after {done} of {end} steps; "
                     f"process 0 writes the checkpoint and the resume command")
            raise SystemExit(128 + signum)
        if done > self._start_step:
            self.save_checkpoint(done - 1)
            saved = f"checkpoint {self.checkpoint_dir / f'step-{done - 1:09d}.ckpt'}"
        elif self._start_step > 0:
            saved = f"nothing new to save (the checkpoint it started from holds step {done})"
        else:
            say_last(f"jax-gs: stopped by {what} before the first block ended: no step trained, nothing saved")
            raise SystemExit(128 + signum)
        load_dir = (self.checkpoint_dir if done > self._start_step
                    else self.config.load_dir or Path(self.config.load_checkpoint).parent)
        command = resume_command(sys.argv, self.config.method_name, load_dir, end - done)
        say_last(f"jax-gs: stopped by {what} after {done} of {end} steps; {saved}; resume with: {command}")
        raise SystemExit(128 + signum)

    def _train_blocks(self, done: int, end: int, block: int, snapshots, interrupts) -> int:
        """Train blocks from step `done` to `end` until done, told to stop, or interrupted (after
        the block under way). Returns the steps done.

        The interrupt is read at the end of each block, never before the first: a Ctrl-C that comes
        after the "training steps" line (the loop may not have started its first block yet) stops
        after one block, as that line promises."""
        while done < end and not self.stop_training:
            while self.training_state == "paused" and not self.stop_training and interrupts.signal is None:
                time.sleep(0.01)
            if self.training_state == "paused" and interrupts.signal is not None:
                break  # interrupted while paused in the viewer: no block is under way
            n = min(block, end - done)
            t0 = time.perf_counter()
            self.pipeline.train()
            stats = self.pipeline.train_block(n, end, publish_lock=self.train_lock)  # the viewer renders meanwhile
            dt = time.perf_counter() - t0
            before, done = done, done + n
            if before == self._start_step:  # the first block of this command: compiled (or loaded from the cache)
                log.info(f"first block (steps {before + 1}-{done}) done in {dt:.1f} s")
            self.step = step = done - 1  # nerfstudio's step: index of the last iteration run
            for s in range(before, done):  # per-step time for the progress table and the viewer
                writer.put_time(name=EventName.ITER_TRAIN_TIME, duration=dt / n, step=s, avg_over_steps=True)
            writer.put_time(name=EventName.TRAIN_RAYS_PER_SEC,
                            duration=self.pipeline.rays_per_step() / max(dt / n, 1e-6),
                            step=step, avg_over_steps=True)
            if snapshots is not None:
                snapshots.check()  # out of space: stop here, the checkpoints would not fit either
                self.pipeline.snapshot(snapshots)  # written by a background thread
            self._update_viewer_state(step)
            if crossed(before - 1, step, self.config.logging.steps_per_log) or before == 0:
                writer.put_scalar(name="Train Loss", scalar=stats["loss"], step=step)
                writer.put_dict(name="Train Metrics Dict", scalar_dict={**stats, "steps_per_sec": n / dt}, step=step)
            if self.config.main_process and self.pipeline.datamanager.eval_dataset:
                with self.train_lock:
                    self._eval_after_block(max(before - 1, 0), step)  # as nerfstudio: not at step 0
            if crossed(max(before - 1, 0), step, self.config.steps_per_save):
                self.save_checkpoint(step)
            writer.write_out_storage()
            if interrupts.signal is not None:
                break
        return done

    @check_main_thread
    def save_checkpoint(self, step: int) -> None:
        """nerfstudio's checkpoint, written atomically: a kill mid-write leaves the previous ones
        intact. The temporary file lies next to the checkpoint folder, not in it, because
        nerfstudio parses every file name in that folder as a step number. Process 0 alone writes
        (every process holds the same state)."""
        if not self.config.main_process:
            return
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        ckpt_path = self.checkpoint_dir / f"step-{step:09d}.ckpt"
        state = {
            "step": step,
            "pipeline": self.pipeline.state_dict(),
            "optimizers": {k: v.state_dict() for k, v in self.optimizers.optimizers.items()},
            "schedulers": {k: v.state_dict() for k, v in self.optimizers.schedulers.items()},
            "scalers": self.grad_scaler.state_dict(),
        }
        with atomic_open(ckpt_path, temp_dir=self.checkpoint_dir.parent, size=lambda: _saved_size(state)) as f:
            torch.save(state, f)
        if self.config.save_only_latest_checkpoint:
            for f in self.checkpoint_dir.glob("*.ckpt"):
                if f != ckpt_path:
                    f.unlink()

    def _eval_after_block(self, before: int, step: int) -> None:
        if crossed(before, step, self.config.steps_per_eval_image):
            metrics, images = self.pipeline.get_eval_image_metrics_and_images(step=step)
            writer.put_dict(name="Eval Images Metrics", scalar_dict=metrics, step=step)
            for name, image in images.items():
                writer.put_image(name="Eval Images/" + name, image=image, step=step)
        if crossed(before, step, self.config.steps_per_eval_all_images):
            metrics = self.pipeline.get_average_eval_image_metrics(step=step)
            writer.put_dict(name="Eval Images Metrics Dict (all images)", scalar_dict=metrics, step=step)


class _Counter:
    """A write-only file that counts the bytes written to it."""

    def __init__(self):
        self.bytes = 0

    def write(self, data) -> int:
        self.bytes += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def _saved_size(state) -> int:
    """The bytes `torch.save(state)` writes (serialised once more, into a counter: only asked
    when a checkpoint did not fit)."""
    counter = _Counter()
    torch.save(state, counter)
    return counter.bytes
