"""Where training keeps the images, and how a block's steps read them.

Two places, one `ImageTable` that the block program reads (`step_images`):
- on the device (`DeviceImages`): each replica holds the views its lanes draw
  (`ViewPlan.lane_rows`: the plan deals the views to lanes), so data-parallel replicas hold the
  dataset once between them, not once each; a step reads its views at `ViewPlan.draw`'s slots.
- in host memory (`HostImages`): each block's views are drawn on the host ahead of it, from the
  same random stream as on the device (`ViewPlan.block_views`), and only those images go to the
  device, copied while the block before trains (`prefetch`). The block still runs as one program
  and reads its steps' views from its table by a slot map: nothing looks back at the host.
Both train the same views on the same pixels, so the results are the same.

Which one a run takes: `where_images_go` (asked for, or automatically when the images would not
fit next to the training state)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np

from ..layout import Layout
from .data import Dataset, ViewPlan

IMAGES_SHARE = 0.5  # "auto" keeps the images on the device while they take at most this share of its memory


class ImageTable(NamedTuple):
    """One replica's training images as a block reads them (data parallel: stacked on a leading
    replica axis, each replica its own slice)."""

    images: object  # [N, H, W * C] uint8 (`interleaved_rows`)
    masks: object  # [N, H, W] bool
    slots: object = None  # host images: [num_steps, views_per_replica] int32, each step's rows; None on the device


def interleaved_rows(images, masks, slots=None) -> ImageTable:
    """A table of images [N, H, W, C] (numpy) and masks [N, H, W], each image's rows of W x C bytes.
    An accelerator's compiler lays a step's image out channel-major for the loss: handed
    [N, H, W, C] the H200's transposed the whole table first, a second copy of every image; whole
    images as one row of bytes each, a TPU's padded each step's [H, W, 3] image (figure:
    image-table-layout, benchmarks/results/library_figures.md)."""
    images = np.asarray(images)
    return ImageTable(images.reshape(images.shape[0], images.shape[1], -1), masks, slots)


def step_images(table: ImageTable, slots, index):
    """The uint8 images [B, H, W, C] and masks [B, H, W] of this replica's views in the block's
    `index`-th step (traced): on the device at `slots` (`ViewPlan.draw`), from host images at the
    block's slot map."""
    slots = slots if table.slots is None else table.slots[index]
    images = table.images[slots]
    return images.reshape(images.shape[:2] + (table.masks.shape[2], -1)), table.masks[slots]


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


class DeviceImages:
    """Every training image on the device, each replica its lanes' views."""

    def __init__(self, layout: Layout, plan: ViewPlan, data: Dataset):
        tables = []
        for replica in range(layout.replicas):
            rows = plan.lane_rows(replica)
            if np.array_equal(rows, np.arange(data.num_views)):  # one lane: the dataset as it is
                tables.append(interleaved_rows(data.images, data.masks))
            else:
                tables.append(interleaved_rows(np.asarray(data.images)[rows], np.asarray(data.masks)[rows]))
        self.table = place_tables(layout, tables)

    def block_table(self, first: int, num_steps: int) -> ImageTable:
        return self.table

    def prefetch(self, first: int, num_steps: int) -> None:
        pass


class HostImages:
    """The training images in host memory; each block's on the device (`block_table`), the next
    one's copied while the current block trains (`prefetch`)."""

    def __init__(self, layout: Layout, plan: ViewPlan, data: Dataset):
        self.layout, self.plan = layout, plan
        self.images, self.masks = np.asarray(data.images), np.asarray(data.masks)
        self._tables = {}  # (first step, steps) -> the block's table on the device

    def rows(self, num_steps: int) -> int:
        """Images a block's table holds per replica: the distinct views its steps draw, at most."""
        return min(num_steps, self.plan.table()[0].shape[1]) * self.plan.views_per_replica

    def _build(self, first: int, num_steps: int) -> ImageTable:
        views = self.plan.block_views(first, num_steps)  # [num_steps, lanes]
        per, width = self.plan.views_per_replica, self.rows(num_steps)
        tables = []
        for replica in range(self.layout.replicas):
            mine = views[:, replica * per:(replica + 1) * per].reshape(-1)
            distinct, slots = np.unique(mine, return_inverse=True)
            rows = np.concatenate([distinct, np.full(width - len(distinct), distinct[0])])
            tables.append(interleaved_rows(self.images[rows], self.masks[rows],
                                           slots.reshape(num_steps, per).astype(np.int32)))
        return place_tables(self.layout, tables)

    def block_table(self, first: int, num_steps: int) -> ImageTable:
        """The table of the block of `num_steps` steps from step `first` (prefetched, or copied
        now); the tables of other blocks are let go."""
        key = (first, num_steps)
        table = self._tables.pop(key, None)
        if table is None:
            table = self._build(first, num_steps)
        self._tables = {key: table}  # a block run again (its buffer grown) reads it again
        return table

    def prefetch(self, first: int, num_steps: int) -> None:
        """Start copying the table of the block of `num_steps` steps from `first` (the copy is
        asynchronous: call it after dispatching the current block)."""
        if (first, num_steps) not in self._tables:
            self._tables[(first, num_steps)] = self._build(first, num_steps)


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
