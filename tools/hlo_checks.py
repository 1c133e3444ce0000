"""What a compiled (or lowered) program does that the source does not say, read from its text:
contractions at default precision, traffic with the host, and the Triton kernels' memory writes.

- `default_precision_contractions`: float32 dots and convolutions whose precision is the
  platform's default. At that precision a TPU multiplies float32 operands in bfloat16 (one pass of
  its MXU) and a GPU may use TF32; every contraction jax-gs writes states float32 products
  (`jax_backend.array_ops.F32`) or is elementwise. Reads StableHLO (`lowered.as_text()`) and
  optimised HLO (`compiled.as_text()`: for TPU XLA writes dots as `convolution`, for a GPU cuDNN
  convolutions are custom calls).
- `host_traffic`: instructions that wait on or send to the host: infeed, outfeed, send, recv,
  Python callbacks (`jax.debug.print`, `pure_callback`, ...), moves to host memory. A train block
  compiled in one XLA program should hold none.
- `order_dependent_scatters`: scatters that may land two updates on one place, in no fixed order
  on a GPU.
- `triton_modules` / `memory_ops`: the MLIR of each Pallas kernel compiled for a GPU, and its
  global stores and atomic adds.
"""
from __future__ import annotations

import re

_HLO_CONTRACTION = re.compile(r"=\s*\(?f32\[[^=]*?\s(dot|convolution|custom-call)\(")
_CUDNN_CONV = re.compile(r'custom_call_target="__cudnn\$conv')
_HLO_F32_PRECISION = "operand_precision={highest,highest}"
_SHLO_CONTRACTION = re.compile(r"stablehlo\.(dot_general|convolution)\b")
_SHLO_F32_PRECISION = re.compile(r"precision = \[HIGHEST, HIGHEST\]|precision HIGHEST>, #stablehlo<precision HIGHEST>")


def default_precision_contractions(text: str) -> list:
    """The float32 dot and convolution instructions of StableHLO or HLO text that carry the default
    precision, each as its line (stripped, cut at 300 characters)."""
    found = []
    for line in text.splitlines():
        if _SHLO_CONTRACTION.search(line):
            if "xf32>" in line and not _SHLO_F32_PRECISION.search(line):
                found.append(line.strip()[:300])
            continue
        m = _HLO_CONTRACTION.search(line)
        if not m or (m.group(1) == "custom-call" and not _CUDNN_CONV.search(line)):
            continue
        if _HLO_F32_PRECISION not in line and "algorithm=dot_f32_f32_f32" not in line:
            found.append(line.strip()[:300])
    return found


_HOST_OPCODES = re.compile(r"=\s.*?\s(infeed|outfeed|send|recv|host-compute)\(")
_HOST_TARGETS = re.compile(r'custom_call_target="([^"]*(?:callback|Callback|MoveToHost|host)[^"]*)"')
_HOST_MEMORY = re.compile(r"\{[0-9,]*(?::[^}]*)?S\(5\)")  # memory space 5: pinned host memory


def host_traffic(text: str) -> list:
    """The instructions of optimised HLO text that exchange data with the host, each as its line
    (stripped, cut at 300 characters)."""
    found = []
    for line in text.splitlines():
        if _HOST_OPCODES.search(line) or _HOST_TARGETS.search(line) or _HOST_MEMORY.search(line.split(" metadata=")[0]):
            found.append(line.strip()[:300])
    return found


_TRITON_IR = re.compile(r'\bir = "((?:[^"\\]|\\.)*)"')


def _mlir_bytes(escaped: str) -> bytes:
    """The bytes of a string attribute as MLIR prints it (\\XX hex escapes, \\\\, \\", \\n, \\t)."""
    out, i, named = bytearray(), 0, {"\\": 92, '"': 34, "n": 10, "t": 9}
    while i < len(escaped):
        if escaped[i] != "\\":
            j = escaped.find("\\", i)
            j = len(escaped) if j < 0 else j
            out += escaped[i:j].encode()
            i = j
        elif escaped[i + 1] in named:
            out.append(named[escaped[i + 1]])
            i += 2
        else:
            out.append(int(escaped[i + 1:i + 3], 16))
            i += 3
    return bytes(out)


def triton_modules(text: str) -> list:
    """The Triton modules (MLIR text, `tt` dialect) of the Pallas kernels in a program lowered or
    compiled for a GPU: each `__gpu$xla.gpu.triton` custom call carries its kernel as MLIR
    bytecode in its `ir` attribute, read back here with jaxlib's MLIR and Triton dialect."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.triton import dialect as tt

    modules = []
    for m in _TRITON_IR.finditer(text):
        ctx = jax_mlir.make_ir_context()
        tt.register_dialect(ctx)
        with ctx:
            modules.append(str(ir.Module.parse(_mlir_bytes(m.group(1)))))
    return modules


def memory_ops(module: str) -> dict:
    """Counts of a Triton module's global-memory writes: plain stores and atomic adds."""
    return {"store": len(re.findall(r"\btt\.store\b", module)),
            "atomic_fadd": len(re.findall(r"\btt\.atomic_rmw fadd\b", module)),
            "atomic_other": len(re.findall(r"\btt\.atomic_rmw (?!fadd)", module))}


def order_dependent_scatters(text: str) -> list:
    """The scatters of optimised HLO text whose result may depend on the order of their updates: not
    marked `unique_indices` (two updates may land on one place), except integer sums (exact in any
    order). On a GPU XLA runs them in no fixed order (atomics for a float sum, whichever write lands
    last for a replacement) unless `--xla_gpu_deterministic_ops`. Each as its line (stripped, cut at
    300 characters)."""
    from tools.launches import computations

    _, comps = computations(text)
    found = []
    for line in text.splitlines():
        if " scatter(" not in line or "unique_indices=true" in line:
            continue
        m = re.search(r"to_apply=%?([\w.\-]+)", line)
        root = next((i.opcode for i in comps.get(m.group(1), []) if i.text.lstrip().startswith("ROOT")), None) if m else None
        if root == "add" and re.search(r"=\s*\(?[su](8|16|32|64)\[", line):
            continue
        found.append(line.strip()[:300])
    return found


# -- collectives: what a program moves between devices
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_DTYPE_BYTES = {"f32": 4, "s32": 4, "u32": 4, "f16": 2, "bf16": 2, "s8": 1, "u8": 1, "pred": 1, "f64": 8, "s64": 8,
                "u64": 8, "s16": 2, "u16": 2}
_SHAPE = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")
_COLLECTIVE = re.compile(r"=\s*(.*?)\s(" + "|".join(COLLECTIVES) + r")(-start)?\(")


def _shapes_bytes(shape_text: str) -> list:
    out = []
    for dtype, dims in _SHAPE.findall(shape_text):
        if dtype not in _DTYPE_BYTES:
            continue
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        out.append(n * _DTYPE_BYTES[dtype])
    return out


def _result_bytes(shape_text: str, asynchronous: bool = False, opcode: str = "") -> int:
    """Bytes of a collective's result. The asynchronous forms (`-start`) return a tuple that holds
    their operands as well: an all-gather's result is its largest member, a permute's its first."""
    sizes = _shapes_bytes(shape_text)
    if not asynchronous or len(sizes) <= 1:
        return sum(sizes)
    if opcode == "all-gather":
        return max(sizes)
    if opcode == "collective-permute":
        return sizes[0]
    return sum(sizes) // 2  # (operands, results) of equal sizes


def _group_size(line: str) -> int:
    """Devices in each replica group of a collective (`{{0,1,2,3}}` or the iota form `[2,4]<=[8]`)."""
    m = re.search(r"replica_groups=\{\{([^}]*)\}", line)
    if m:
        return len(m.group(1).split(","))
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", line)
    if m:
        return int(m.group(2))
    m = re.search(r"source_target_pairs=\{([^}]*\})", line)
    return 2 if m else 1


def sent_bytes(opcode: str, result: int, k: int) -> float:
    """Bytes each device sends for one collective over groups of `k` devices with the usual ring
    algorithms, from the size of its result: an all-reduce 2(k-1)/k of it, an all-gather (k-1)/k of
    what it gathers, a reduce-scatter (k-1) times its share, an all-to-all (k-1)/k, a permute all."""
    if k <= 1:
        return 0.0
    return {"all-reduce": 2 * (k - 1) / k * result, "all-gather": (k - 1) / k * result,
            "reduce-scatter": (k - 1) * result, "all-to-all": (k - 1) / k * result,
            "collective-permute": float(result)}[opcode]


def collective_traffic(hlo: str, computation: str | None = None) -> dict:
    """{collective: (instructions, bytes each device sends)} of the optimised HLO `hlo`: in
    `computation` and everything it calls (default the whole module), each instruction once (a
    collective inside a loop the computation runs counts once: pass the loop's body for a per-step
    figure)."""
    from tools.launches import _called, computations

    entry, comps = computations(hlo)
    names = set(comps) if computation is None else set()
    todo = [] if computation is None else [computation]
    while todo:
        name = todo.pop()
        if name in names or name not in comps:
            continue
        names.add(name)
        for ins in comps[name]:
            for key in ("calls", "body", "condition", "to_apply", "branch_computations", "true_computation",
                        "false_computation"):
                todo.extend(_called(ins.text, key))
    out = {}
    for name in names:
        for ins in comps[name]:
            m = _COLLECTIVE.search(ins.text)
            if not m:
                continue
            op = m.group(2)
            count, sent = out.get(op, (0, 0.0))
            result = _result_bytes(m.group(1), bool(m.group(3)), op)
            out[op] = (count + 1, sent + sent_bytes(op, result, _group_size(ins.text)))
    return out
