"""Array operations written so that they compile quickly for every backend, TPU included.

Compiling for a TPU, a prefix sum or maximum over 2^20 elements (`jnp.cumsum`, `lax.cummax`) and
an integer division by a traced divisor are slow to compile; a prefix within blocks of `BLOCK`
and one over the blocks' totals, and a float32 division with one correction step, are fast
(figure: tpu-prefix, benchmarks/results/library_figures.md; docs/tpu.md). On a CPU both forms
compile and run alike. Everything in `jax_backend` that takes a long prefix
or divides by a traced integer uses these.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1): the sizes of the Gaussian slots, the intersection
    buffer and the Pallas kernel's pixel rows."""
    return 1 << max(int(n) - 1, 0).bit_length()

BLOCK = 1024  # elements per block of a blocked prefix

# Contractions at float32 on every platform. At the default precision a TPU multiplies float32
# operands in bfloat16 and a GPU may use TF32 (a 10-bit mantissa); jax-gs's contractions are
# small (3x3 camera algebra, the SSIM window), so full precision costs little and is stated where
# each one is written: `einsum` and `matmul` here, `precision=F32` on a convolution. Everything
# else is written elementwise. `tests/test_precision.py` finds any other.
F32 = jax.lax.Precision.HIGHEST


def einsum(spec: str, *operands):
    """`jnp.einsum` with float32 products on every platform (`F32`)."""
    return jnp.einsum(spec, *operands, precision=F32)


def matmul(a, b):
    """`a @ b` with float32 products on every platform (`F32`)."""
    return jnp.matmul(a, b, precision=F32)


def _blocked(op, combine, identity, x):
    n = x.shape[0]
    if n <= BLOCK:
        return op(x, axis=0)
    rows = -(-n // BLOCK)
    pad = rows * BLOCK - n
    padded = jnp.concatenate([x, jnp.full((pad,) + x.shape[1:], identity, x.dtype)]) if pad else x
    inner = op(padded.reshape((rows, BLOCK) + x.shape[1:]), axis=1)
    totals = _blocked(op, combine, identity, inner[:, -1])  # recursion: more than BLOCK rows
    before = jnp.concatenate([jnp.full((1,) + x.shape[1:], identity, x.dtype), totals[:-1]])
    return combine(inner, before[:, None]).reshape((rows * BLOCK,) + x.shape[1:])[:n]


def cumsum(x):
    """Inclusive prefix sum along axis 0 (`jnp.cumsum(x, axis=0)`), in blocks of BLOCK. Integer
    sums are exact; float sums add in another order than one long scan (deterministic)."""
    x = jnp.asarray(x)
    return _blocked(jax.lax.cumsum, jnp.add, 0, x)


def cummax(x):
    """Inclusive prefix maximum along axis 0 (`lax.cummax(x, axis=0)`), in blocks of BLOCK."""
    x = jnp.asarray(x)
    low = jnp.iinfo(x.dtype).min if jnp.issubdtype(x.dtype, jnp.integer) else -jnp.inf
    return _blocked(jax.lax.cummax, jnp.maximum, low, x)


def run_starts(sorted_keys, num_keys: int):
    """[num_keys + 1] int32: for each k in 0..num_keys, the first position whose key is >= k
    (`jnp.searchsorted(sorted_keys, arange(num_keys + 1), side="left")`), for nondecreasing int32
    keys in [0, num_keys].

    The first slot of each run of equal keys is scattered to its key (distinct indices; the other
    slots to distinct places past the end, dropped), and a reverse prefix minimum gives the keys
    that do not occur the start of the next one. No loop: `searchsorted` is a while loop of
    log2(M) steps, and on a GPU every step is a kernel launch (figure: run-starts,
    benchmarks/results/library_figures.md)."""
    m = sorted_keys.shape[0]
    slot = jnp.arange(m, dtype=jnp.int32)
    first = jnp.concatenate([jnp.ones((1,), bool), sorted_keys[1:] != sorted_keys[:-1]])
    at = jnp.where(first, sorted_keys, num_keys + 1 + slot)
    starts = jnp.full((num_keys + 1,), m, jnp.int32).at[at].set(slot, mode="drop", unique_indices=True)
    return jax.lax.cummin(starts, axis=0, reverse=True)


def small_divmod(a, b):
    """(a // b, a % b) for int32 arrays with 0 <= a < 2^24 and 1 <= b < 2^24 (e.g. positions in a
    Gaussian's tile box): a float32 quotient, corrected by one where it rounded across an
    integer. Exact in that range."""
    a = jnp.asarray(a, jnp.int32)
    b = jnp.asarray(b, jnp.int32)
    q = jnp.floor(a.astype(jnp.float32) / b.astype(jnp.float32)).astype(jnp.int32)
    r = a - q * b
    q = jnp.where(r < 0, q - 1, jnp.where(r >= b, q + 1, q))
    return q, a - q * b


def where_tree(pred, on_true, on_false):
    """`on_true` where the scalar `pred` holds, else `on_false`, leaf by leaf: a select instead of a
    `lax.cond` for per-Gaussian arrays whose both values are at hand. On a TPU a cond's outputs
    take row-major layouts, in which small trailing axes ([N, 3], [N, 15, 3]) are padded to 128
    lanes: density control's cond over the grown state asked for several times the temporaries of
    its select (figure: select-not-cond, benchmarks/results/library_figures.md)."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def radix_sort(keys, bits: int, values=None):
    """Stable sort of unsigned keys below 2^bits: (sorted keys, `values` in that order; by default
    the permutation, i.e. a stable argsort). Least significant bit first: each pass moves the keys
    whose bit is 0 before those whose bit is 1, keeping their order (one prefix sum gives every
    key's place), one `fori_loop` body for all `bits` passes.

    For TPU: XLA's sort of 2^17-2^20 keys is slow to compile for a TPU, this one fast; on a CPU
    `lax.sort` is faster to run (figure: tpu-radix, benchmarks/results/library_figures.md).
    """
    keys = jnp.asarray(keys).astype(jnp.uint32)
    n = keys.shape[0]
    values = jnp.arange(n, dtype=jnp.int32) if values is None else jnp.asarray(values)
    index = jnp.arange(n, dtype=jnp.int32)

    def one_pass(i, kv):
        k, v = kv
        one = ((k >> i.astype(jnp.uint32)) & jnp.uint32(1)).astype(jnp.int32)
        zeros_upto = cumsum(1 - one)  # keys with bit 0 up to and including each key
        place = jnp.where(one == 0, zeros_upto - 1, zeros_upto[-1] + index - zeros_upto)
        k = jnp.zeros_like(k).at[place].set(k, unique_indices=True)
        v = jnp.zeros_like(v).at[place].set(v, unique_indices=True)
        return k, v

    if n <= 1 or bits <= 0:
        return keys, values
    return jax.lax.fori_loop(0, bits, one_pass, (keys, values))


def per_platform(*args, tpu, default):
    """`tpu(*args)` in a program lowered for a TPU, `default(*args)` elsewhere, for two ways of
    computing the same values (`jax.lax.platform_dependent`: JAX picks the branch when it lowers
    for a platform, and the compiler sees that branch alone). The sorts use it: a radix sort on
    TPU, where XLA's sort of 2^17-2^20 keys is slow to compile and the radix sort fast, and 64-bit
    keys (`sort_pairs`) are emulated; elsewhere `lax.sort`, which runs faster (figure: tpu-radix,
    benchmarks/results/library_figures.md)."""
    return jax.lax.platform_dependent(*args, tpu=tpu, default=default)


def sortable_bits(x):
    """f32 -> u32 whose unsigned order is the order of `jnp.sort` (-0 equal to 0, NaNs last)."""
    x = x.astype(jnp.float32)
    x = jnp.where(jnp.isnan(x), jnp.nan, jnp.where(x == 0, 0.0, x))  # one zero and one NaN, as sort compares
    b = jax.lax.bitcast_convert_type(x, jnp.uint32)
    return jnp.where(b >> 31 == 1, ~b, b | jnp.uint32(1 << 31))


def sort_pairs(hi, lo):
    """u32 pairs sorted by (hi, lo): one sort of the 64-bit keys hi << 32 | lo.

    A sort of one operand takes XLA's fast path; the same order from a two-operand sort (a key and
    a payload, as `jnp.argsort`) took several times as long on a CPU (figure: one-operand-sort,
    benchmarks/results/library_figures.md). The 64-bit keys exist only inside this function.
    """
    with jax.enable_x64(True):
        key = jax.lax.sort((hi.astype(jnp.uint64) << jnp.uint64(32)) | lo.astype(jnp.uint64))
        return (key >> jnp.uint64(32)).astype(jnp.uint32), (key & jnp.uint64(0xFFFFFFFF)).astype(jnp.uint32)


def argsort(x):
    """[N] int32: `jnp.argsort(x, stable=True)` of float32 `x` (ties by index, -0 equal to 0, NaNs
    last): a radix sort of the value bits on TPU (`argsort_by_radix`), one sort of (value bits,
    index) pairs elsewhere (`argsort_by_pairs`; `per_platform`)."""
    return per_platform(x, tpu=argsort_by_radix, default=argsort_by_pairs)


def argsort_by_radix(x):
    """`argsort` as a TPU program computes it."""
    return radix_sort(sortable_bits(x), 32)[1].astype(jnp.int32)


def argsort_by_pairs(x):
    """`argsort` as every other program computes it."""
    return sort_pairs(sortable_bits(x), jnp.arange(x.shape[0], dtype=jnp.uint32))[1].astype(jnp.int32)


def component_rows(a, gid):
    """`a` [C, N] at Gaussian ids `gid` (N: none, zeros): [C, *gid.shape], one gather from `a`'s
    C x N values in a row. Gathering [C, N] by columns instead, a TPU lays `a` out as [N, C] rows,
    each padded to 128 lanes (42x a Gaussian's 3 values; docs/tpu.md). The lanes walk and density
    control's `gather_rows` gather so."""
    c, n = a.shape
    at = jnp.where(gid < n, gid, c * n)[None] + n * jnp.arange(c, dtype=gid.dtype).reshape((c,) + (1,) * gid.ndim)
    return a.reshape(-1).at[at].get(mode="fill", fill_value=0)


def component_sums(acc, gid, rows):
    """Per-Gaussian sums held component-major, flat: `acc` [C x N] with `rows` [T, C] added at
    Gaussian ids `gid` [T] (N or more: dropped). Held as [N, C] rows, a TPU pads the sums to 128
    lanes (`component_rows`); one 1-D scatter-add of T x C values with repeated ids is compiled
    around a hidden sort for TPU. So the T rows are put in order of their ids first (ranks counted
    over the T x T pairs, ties by position: T is a step's lanes, tens) and the scatter is told its
    indices are sorted; the dropped rows add zeros to the last Gaussian."""
    t, c = rows.shape
    n = acc.shape[0] // c
    valid = gid < n
    key = jnp.where(valid, gid, n - 1)
    pos = jnp.arange(t, dtype=gid.dtype)
    before = (key[None, :] < key[:, None]) | ((key[None, :] == key[:, None]) & (pos[None, :] < pos[:, None]))
    rank = jnp.sum(before, axis=1, dtype=gid.dtype)  # a permutation of 0..T-1
    key = jnp.zeros_like(key).at[rank].set(key, unique_indices=True)
    rows = jnp.zeros_like(rows).at[rank].set(jnp.where(valid[:, None], rows, 0.0), unique_indices=True)
    at = key[None, :] + n * jnp.arange(c, dtype=gid.dtype)[:, None]  # [C, T], ascending in C-major order
    return acc.at[at.reshape(-1)].add(rows.T.reshape(-1), indices_are_sorted=True, mode="promise_in_bounds")
