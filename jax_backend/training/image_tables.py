"""Where training keeps the images, and how a block's steps read them.

Every block's draws (`ViewPlan.block_draws`: each step's views) are made on the host ahead of it,
and the block reads them from its `ImageTable` as values, with each step's rows of images:
nothing of the capture's view table is a constant of its program. The images stay in one of two
places:
- on the device (`DeviceImages`): each replica holds the views its lanes draw
  (`ViewPlan.lane_rows`: the plan deals the views to lanes, each lane's padded to a
  `view_bucket`), so data-parallel replicas hold the dataset once between them, not once each;
- in host memory (`HostImages`): only the block's views go to the device, copied while the block
  before trains (`prefetch`).
Both train the same views on the same pixels, so the results are the same.

Which one a run takes: `where_images_go` (asked for, or automatically when the images would not
fit next to the training state)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..devices import padded_rows
from ..layout import Layout
from .data import Dataset, ViewPlan

IMAGES_SHARE = 0.5  # "auto" keeps the images on the device while they take at most this share of its memory


class ImageTable(NamedTuple):
    """One replica's training images and one block's draws, as the block reads them (data
    parallel: stacked on a leading replica axis, each replica its own slice)."""

    images: object  # [N, H, W * C] uint8 (`interleaved_rows`)
    masks: object  # [N, H, W] bool, or [N, 1, W]: every row alike (`make_dataset`)
    views: object = None  # [num_steps, views_per_replica] int32: each step's views (the dataset's, for their cameras)
    slots: object = None  # [num_steps, views_per_replica] int32: each step's rows of `images`


def interleaved_rows(images, masks) -> ImageTable:
    """A table of images [N, H, W, C] (numpy) and masks [N, H, W], each image's rows of W x C bytes.
    An accelerator's compiler lays a step's image out channel-major for the loss: handed
    [N, H, W, C] the H200's transposed the whole table first, a second copy of every image; whole
    images as one row of bytes each, a TPU's padded each step's [H, W, 3] image (figure:
    image-table-layout, benchmarks/results/library_figures.md)."""
    images = np.asarray(images)
    return ImageTable(images.reshape(images.shape[0], images.shape[1], -1), masks)


def step_images(table: ImageTable, index):
    """The views [B] of this replica's `index`-th step of the block (traced), their uint8 images
    [B, H, W, C] and masks [B, H, W]."""
    slots = table.slots[index]
    images = table.images[slots]
    images = images.reshape(images.shape[:2] + (table.masks.shape[2], -1))
    return table.views[index], images, jnp.broadcast_to(table.masks[slots], images.shape[:3])


def place_tables(layout: Layout, tables) -> ImageTable:
    """Numpy `ImageTable`s, one per replica of this process, on the devices: data parallel each
    replica's on its own devices (whole on each of its tile devices); else whole on each tile
    device."""
    if layout.data_parallel:
        return layout.place_replicas(jax.tree_util.tree_map(lambda *xs: np.stack(xs), *tables))
    if layout.tile_devices > 1:
        return layout.place(tables[0])
    return jax.device_put(tables[0], layout.devices[0])


def where_images_go(requested: str, image_bytes: int, device_bytes: Optional[int]):
    """("device" | "host", why) for a run's training images of `image_bytes` (per device).

    `requested`: "device", "host", or "auto": on the device unless they take more than
    IMAGES_SHARE of `device_bytes` (the memory of one device; None: not known, on the device)."""
    if requested in ("device", "host"):
        return requested, "asked for"
    if requested != "auto":
        raise ValueError(f"training images go to 'device', 'host' or 'auto', not {requested!r}")
    if device_bytes is None or image_bytes <= IMAGES_SHARE * device_bytes:
        return "device", "they fit"
    return "host", (f"they take {image_bytes / 2**30:.2f} GiB, more than {IMAGES_SHARE:.0%} of the device's "
                    f"{device_bytes / 2**30:.2f} GiB")


class _BlockTables:
    """Each block's `ImageTable` built on the host (`_build`) when the block is dispatched, or ahead
    of it while the block before trains (`prefetch`: the copy is asynchronous)."""

    def __init__(self, layout: Layout, plan: ViewPlan):
        self.layout, self.plan = layout, plan
        self._tables = {}  # (first step, steps) -> the block's table on the device

    def _replica_draws(self, first: int, num_steps: int):
        """Each replica's (views, positions in its lanes' rows of the plan's table), each
        [num_steps, views_per_replica]."""
        views, positions = self.plan.block_draws(first, num_steps)
        per = self.plan.views_per_replica
        return [(views[:, r * per:(r + 1) * per], positions[:, r * per:(r + 1) * per])
                for r in range(self.layout.replicas)]

    def block_table(self, first: int, num_steps: int) -> ImageTable:
        """The table of the block of `num_steps` steps from step `first` (prefetched, or built
        now); the tables of other blocks are let go."""
        key = (first, num_steps)
        table = self._tables.pop(key, None)
        if table is None:
            table = self._build(first, num_steps)
        self._tables = {key: table}  # a block run again (its buffer grown) reads it again
        return table

    def prefetch(self, first: int, num_steps: int) -> None:
        """Start building the table of the block of `num_steps` steps from `first` (call it after
        dispatching the current block)."""
        if (first, num_steps) not in self._tables:
            self._tables[(first, num_steps)] = self._build(first, num_steps)


class DeviceImages(_BlockTables):
    """Every training image on the device, each replica its lanes' views; a block's table adds
    its draws."""

    def __init__(self, layout: Layout, plan: ViewPlan, data: Dataset):
        super().__init__(layout, plan)
        tables, V = [], data.num_views
        for replica in range(layout.replicas):
            rows = plan.lane_rows(replica)
            if np.array_equal(rows[:V], np.arange(V)):  # one lane: the dataset as it is (its padding never drawn)
                tables.append(interleaved_rows(padded_rows(data.images, len(rows)), padded_rows(data.masks, len(rows))))
            else:
                tables.append(interleaved_rows(np.asarray(data.images)[rows], np.asarray(data.masks)[rows]))
        self.table = place_tables(layout, tables)

    def _build(self, first: int, num_steps: int) -> ImageTable:
        lanes_at = np.arange(self.plan.views_per_replica) * self.plan.rows_per_lane  # lane j's rows start there
        drawn = place_tables(self.layout, [ImageTable(None, None, views, (positions + lanes_at).astype(np.int32))
                                           for views, positions in self._replica_draws(first, num_steps)])
        return self.table._replace(views=drawn.views, slots=drawn.slots)


class HostImages(_BlockTables):
    """The training images in host memory; each block's on the device (`block_table`), the next
    one's copied while the current block trains (`prefetch`)."""

    def __init__(self, layout: Layout, plan: ViewPlan, data: Dataset):
        super().__init__(layout, plan)
        self.images, self.masks = np.asarray(data.images), np.asarray(data.masks)

    def rows(self, num_steps: int) -> int:
        """Images a block's table holds per replica: the distinct views its steps draw, at most."""
        return min(num_steps, self.plan.rows_per_lane) * self.plan.views_per_replica

    def _build(self, first: int, num_steps: int) -> ImageTable:
        width, tables = self.rows(num_steps), []
        for views, _ in self._replica_draws(first, num_steps):
            distinct, slots = np.unique(views.reshape(-1), return_inverse=True)
            rows = np.concatenate([distinct, np.full(width - len(distinct), distinct[0])])
            table = interleaved_rows(self.images[rows], self.masks[rows])
            tables.append(table._replace(views=views, slots=slots.reshape(views.shape).astype(np.int32)))
        return place_tables(self.layout, tables)


def make_images(where: str, layout: Layout, plan: ViewPlan, data: Dataset):
    """`DeviceImages` or `HostImages` of `data` for `layout` and `plan`."""
    return HostImages(layout, plan, data) if where == "host" else DeviceImages(layout, plan, data)


def device_memory(layout: Layout) -> Optional[int]:
    """Bytes of memory of one of `layout`'s devices, as the runtime reports it (None: not
    reported, as on a CPU)."""
    try:
        stats = layout.devices[0].memory_stats()
    except Exception:  # noqa: BLE001 - a runtime without memory statistics
        return None
    return int(stats["bytes_limit"]) if stats and "bytes_limit" in stats else None
