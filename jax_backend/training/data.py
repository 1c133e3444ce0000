"""The training data on the device: every view's image, mask and camera (`Dataset`), how the
views of each step are drawn (`ViewPlan`), and the scene's extent from its cameras."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..devices import aliasable_zeros, return_free_memory


class Dataset(NamedTuple):
    """Every training view: its image, mask and camera. Images of different sizes are padded to the
    largest; `masks` marks the real (and, with user masks, the wanted) pixels. The cameras are on
    the device; the images and masks too, or numpy arrays in host memory (`make_dataset`'s
    `on_device`; where training keeps them: `image_tables`)."""

    images: jnp.ndarray  # [V, H, W, 3|4] uint8
    masks: jnp.ndarray  # [V, H, W] bool, or [V, 1, W]: every row alike (`make_dataset`)
    viewmats: jnp.ndarray  # [V, 4, 4] world-to-camera, OpenCV axes
    Ks: jnp.ndarray  # [V, 3, 3]
    distortions: jnp.ndarray  # [V, 4] a fisheye's k1-k4 (`TrainConfig.camera_model`; zeros otherwise)
    extent: object = None  # [] float32, the scene's extent, in what a block reads (`block_cameras`); else None

    @property
    def num_views(self) -> int:
        return self.viewmats.shape[0]

    @property
    def height(self) -> int:
        return self.images.shape[1]

    @property
    def width(self) -> int:
        return self.images.shape[2]

    @property
    def image_bytes(self) -> int:
        """Bytes of the images and masks."""
        return int(self.images.nbytes + self.masks.nbytes)

    def cameras_only(self) -> "Dataset":
        """The cameras, without the images and masks (None)."""
        return self._replace(images=None, masks=None)


def view_bucket(n: int) -> int:
    """The rows an array of `n` views is padded to where a compiled program holds it: `n` up to 8,
    else the smallest of 4, 5, 6 or 7 times a power of two that is at least `n` (at most a quarter
    more). Captures whose view counts fall in one bucket compile the same programs."""
    if n <= 8:
        return int(n)
    scale = 1 << (int(n).bit_length() - 3)  # n in [4, 8) x scale
    return next(m * scale for m in (4, 5, 6, 7, 8) if m * scale >= n)


def block_cameras(data: Dataset, scene_extent: float) -> Dataset:
    """What a block program reads of the dataset: the cameras, padded to `view_bucket` views (the
    rows past the dataset's are never drawn), and the scene's extent as a value, not a constant of
    the program: two captures with images of one size, other view counts in one bucket and other
    extents run the same compiled blocks (the persistent compilation cache serves the second)."""
    data = data.cameras_only()
    pad = view_bucket(data.num_views) - data.num_views

    def padded(x):
        return np.concatenate([np.asarray(x), np.zeros((pad,) + x.shape[1:], np.float32)]) if pad else x

    return data._replace(viewmats=padded(data.viewmats), Ks=padded(data.Ks), distortions=padded(data.distortions),
                         extent=np.float32(scene_extent))




def make_dataset(images, viewmats, Ks, masks=None, distortions=None, on_device: bool = True,
                 release: bool = False) -> Dataset:
    """Pad the views to one size and put them on the device (the images and masks stay numpy
    arrays in host memory when `on_device` is False: `aliasable_zeros`, so that a CPU device takes
    them without a copy).

    Args:
      images: list of [H_i, W_i, 3|4] uint8 (or float in [0, 1]) arrays, or one [V, H, W, C] array.
        When some have an alpha channel and some do not, those without are opaque.
      viewmats: [V, 4, 4] world-to-camera (OpenCV axes); Ks: [V, 3, 3].
      masks: optional list of [H_i, W_i] bool, the pixels to train on.
      distortions: optional [V, 4], each view's fisheye coefficients k1-k4 (the cameras drawn as
        `TrainConfig.camera_model` "fisheye"; default zeros).
      release: empty the lists `images` and `masks` view by view as each is copied, so that a
        caller whose lists hold the only references never holds the capture twice.

    Returns:
      `Dataset`. Padding pixels are masked out; when every pixel of every view trains (no masks,
      no padding) `masks` is [V, 1, W]: one row standing for every row (`image_tables.step_images`
      broadcasts it), not a third of the images' bytes again.
    """
    if isinstance(images, np.ndarray) and images.ndim == 4:
        images = list(images)
    if not len(images):
        raise ValueError("no training images")
    shapes = [np.shape(im) for im in images]
    if any(len(s) != 3 or s[-1] not in (3, 4) for s in shapes):
        raise ValueError(f"images must be [H,W,3] or [H,W,4]; got shapes {sorted(set(shapes))}")
    H, W = max(s[0] for s in shapes), max(s[1] for s in shapes)
    V, C = len(images), max(s[-1] for s in shapes)  # RGB among RGBA: opaque
    whole = masks is None and all(s[:2] == (H, W) for s in shapes)
    spare = view_bucket(V) - V  # rows an image table may be padded to (`image_tables.DeviceImages`)
    out = aliasable_zeros((V, H, W, C), np.uint8, spare)
    valid = aliasable_zeros((V, 1, W) if whole else (V, H, W), bool, spare)
    for i in range(V):
        im = np.asarray(images[i])
        if im.dtype != np.uint8:
            im = np.clip(np.round(np.asarray(im, np.float32) * 255), 0, 255).astype(np.uint8)
        h, w = im.shape[:2]
        out[i, :h, :w, :im.shape[-1]] = im
        if im.shape[-1] < C:
            out[i, :h, :w, C - 1] = 255
        valid[i, :h, :w] = True if masks is None else np.asarray(masks[i], bool)
        if release:  # the view's memory back to the system before the next one is copied
            images[i] = None
            if masks is not None:
                masks[i] = None
            del im
            return_free_memory()
    viewmats, Ks = np.asarray(viewmats, np.float32), np.asarray(Ks, np.float32)
    if viewmats.shape != (V, 4, 4) or Ks.shape != (V, 3, 3):
        raise ValueError(f"need viewmats [V,4,4] and Ks [V,3,3] for V={V}, got {viewmats.shape}, {Ks.shape}")
    distortions = np.zeros((V, 4), np.float32) if distortions is None else np.asarray(distortions, np.float32)
    if distortions.shape != (V, 4):
        raise ValueError(f"need distortions [V,4] (k1-k4 of each view) for V={V}, got {distortions.shape}")
    place = jnp.asarray if on_device else np.asarray
    return Dataset(place(out), place(valid), jnp.asarray(viewmats), jnp.asarray(Ks), jnp.asarray(distortions))


@dataclass(frozen=True)
class ViewPlan:
    """How the views of one step are drawn, for `replicas` data-parallel devices (this host's)
    each rendering `views_per_replica` views per step. The dataset's views are dealt to
    `lanes = replicas * views_per_replica` lanes (lane l: views l, l + lanes, ...); every lane
    goes through its views once per epoch in its own random order. Lane l's view at step t is a
    pure function of (seed, global lane, t): nothing to carry, resumable, and the same views
    whether the lanes sit on 4 devices or in one batch of 4 on one device.

    `axis_name` names the replica axis (None: one replica, no collectives); `lane_offset` is this
    host's first global lane (multi-host: each host deals its own shard of the views)."""

    num_views: int
    views_per_replica: int = 1
    replicas: int = 1
    axis_name: Optional[str] = None
    lane_offset: int = 0
    seed: int = 0

    @property
    def lanes(self) -> int:
        """Views drawn per step on this host (replicas x views per replica)."""
        return self.replicas * self.views_per_replica

    def table(self):
        """[lanes, S] view indices (-1 padding) and [lanes] counts, as numpy (static)."""
        if self.num_views < self.lanes:
            raise ValueError(f"{self.lanes} views per step need at least as many training views, "
                             f"this dataset has {self.num_views}")
        S = -(-self.num_views // self.lanes)
        table = np.full((self.lanes, S), -1, np.int32)
        for lane in range(self.lanes):
            own = np.arange(lane, self.num_views, self.lanes)
            table[lane, : len(own)] = own
        return table, (table >= 0).sum(1).astype(np.int32)

    @property
    def rows_per_lane(self) -> int:
        """Rows each lane's views take in an image table on the device (`lane_rows`): the width of
        `table`, padded to its `view_bucket`."""
        return view_bucket(self.table()[0].shape[1])

    def replica_lanes(self):
        """The global lane of each of this replica's [views_per_replica] views (traced)."""
        lanes = jnp.arange(self.views_per_replica)
        if self.axis_name is not None:  # axis_index counts every host's devices
            lanes = lanes + jax.lax.axis_index(self.axis_name) * self.views_per_replica
        return lanes

    def drawn(self, lanes, step):
        """(view, position in its lane's row of `table`) of each global lane in `lanes` at `step`:
        the lane's epoch's random order, a pure function of (seed, lane, step)."""
        table, counts = (jnp.asarray(a) for a in self.table())
        base = jax.random.PRNGKey(self.seed)

        def one(lane):
            local = lane - self.lane_offset  # lanes are dealt this host's views
            n = counts[local]
            epoch, pos = step // n, step % n
            k = jax.random.fold_in(jax.random.fold_in(base, lane), epoch)
            order = jnp.argsort(jnp.where(table[local] >= 0, jax.random.uniform(k, table.shape[1:]), 2.0))
            return table[local, order[pos]], order[pos]

        return jax.vmap(one)(lanes)

    def views(self, step):
        """The [views_per_replica] views (this host's indices) this replica trains on at `step`."""
        return self.drawn(self.replica_lanes(), step)[0]

    def lane_rows(self, replica: int) -> np.ndarray:
        """The views of this host's `replica`'s image table on the device [views_per_replica *
        rows_per_lane]: its lanes' rows of `table`, one after the other, each padded to
        `rows_per_lane` (a padding slot repeats the lane's first view; none is drawn)."""
        table = self.table()[0][replica * self.views_per_replica:(replica + 1) * self.views_per_replica]
        table = np.pad(table, ((0, 0), (0, self.rows_per_lane - table.shape[1])), constant_values=-1)
        return np.where(table >= 0, table, table[:, :1]).reshape(-1)

    def block_draws(self, first: int, num_steps: int):
        """The draws of steps first .. first + num_steps - 1 of every lane of this host, ahead of
        the block that trains them, as numpy int32 [num_steps, lanes] (lane order: replica by
        replica): (each lane's view, its position in the lane's row of `table`). The block reads
        them as values (`image_tables`), so its program holds no view table of the capture."""
        lanes = self.lane_offset + np.arange(self.lanes)
        steps = first + np.arange(num_steps, dtype=np.int32)
        return tuple(np.asarray(x, np.int32) for x in _block_draws(self, lanes, steps))

    def block_views(self, first: int, num_steps: int) -> np.ndarray:
        """The views of `block_draws` [num_steps, lanes]."""
        return self.block_draws(first, num_steps)[0]


@partial(jax.jit, static_argnums=0)
def _block_draws(plan: ViewPlan, lanes, steps):
    return jax.vmap(lambda step: plan.drawn(lanes, step))(steps)


def downscale_views(images, masks, Ks, factor: int):
    """Views' images as float targets, downscaled by a static integer `factor` (the mean of each
    factor x factor block; a block is valid when all its pixels are), and their intrinsics scaled
    to match.

    Args:
      images: [B, H, W, C] uint8; masks: [B, H, W] bool; Ks: [B, 3, 3].

    Returns:
      (images [B, H/f, W/f, C] float32 in [0, 1], masks [B, H/f, W/f], Ks [B, 3, 3], width, height).
    """
    images = images.astype(jnp.float32) / 255.0
    B, H, W, C = images.shape
    if factor == 1:
        return images, masks, Ks, W, H
    Ks, w, h = downscaled_cameras(Ks, W, H, factor)
    images = images[:, : h * factor, : w * factor].reshape(B, h, factor, w, factor, C).mean((2, 4))
    masks = masks[:, : h * factor, : w * factor].reshape(B, h, factor, w, factor).all((2, 4))
    return images, masks, Ks, w, h


def downscaled_cameras(Ks, width: int, height: int, factor: int):
    """Intrinsics [.., 3, 3] and image size for images downscaled by an integer `factor` (whole
    factor x factor blocks, as `downscale_views` averages them): (Ks, width, height)."""
    Ks = jnp.asarray(Ks).at[..., :2, :].divide(float(factor)).at[..., 2, 2].set(1.0)
    return Ks, width // factor, height // factor


def scene_extent(viewmats) -> float:
    """The 3DGS "cameras extent": 1.1 x the largest distance of a camera centre from their mean.

    Args:
      viewmats: [V, 4, 4] world-to-camera matrices.
    """
    positions = camera_centres(viewmats)
    return 1.1 * float(np.max(np.linalg.norm(positions - positions.mean(0), axis=1)))


def camera_centres(viewmats) -> np.ndarray:
    """[V, 3] float64 camera centres in world coordinates of world-to-camera matrices [V, 4, 4]."""
    return np.linalg.inv(np.asarray(viewmats, np.float64))[:, :3, 3]
