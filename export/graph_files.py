"""A graph's file: its weights inside it, or beside it in one file where they are too many;
and the graphs of a variant sharing one file of weights.

A file of protobuf holds 2 GiB at the most, and a large translator's step is more in fp32
(NLLB-1.3B's is 2.6 GB): past WEIGHTS_INSIDE bytes, a graph's weights go to
`<file>.data` beside it, where onnx and onnxruntime read them from. The model repository
lists and checksums that file as any other of a version's.

A translator's variant ships its step up to six times (growing, in place and static; with
its alignment and lean), each graph with the same weights: `share_weights` keeps each
distinct weight once, in SHARED beside them, every graph reading it at its offset.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx

# a graph's weights up to this many bytes stay inside its file; more go to `data_file`
WEIGHTS_INSIDE = 1 << 30
DATA_SUFFIX = ".data"  # `decoder.onnx.data`
SMALL = 1024  # bytes of a weight kept inside the graph's file whatever: shapes onnxruntime reads
SHARED = "weights.data"  # the file of weights the graphs of a folder share (`share_weights`)
# where each weight starts in SHARED: onnxruntime maps a weight of the CPU into memory, the
# pages every session reading it shares, where its offset is a multiple of the page size
ALIGNMENT = 4096


def weight_bytes(proto: onnx.ModelProto) -> int:
    """The bytes of a graph's weights (its initializers' data)."""
    return sum(len(t.raw_data) or t.ByteSize() for t in proto.graph.initializer)


def outside(proto: onnx.ModelProto, inside: int | None = None) -> bool:
    """Whether `proto`'s weights are too many to stay inside its file: more than `inside`
    bytes (WEIGHTS_INSIDE by default)."""
    return weight_bytes(proto) > (WEIGHTS_INSIDE if inside is None else inside)


@contextmanager
def weights_set_aside(proto: onnx.ModelProto, above: int = SMALL) -> Iterator[onnx.ModelProto]:
    """`proto` with the data of its weights past `above` bytes set aside (their shapes and
    types kept), then put back: what shape inference reads of a graph past 2 GiB, which
    protobuf cannot serialise whole."""
    aside = [(t, t.raw_data) for t in proto.graph.initializer if len(t.raw_data) > above]
    for tensor, _ in aside:
        tensor.raw_data = b""
    try:
        yield proto
    finally:
        for tensor, data in aside:
            tensor.raw_data = data


def data_file(path: Path) -> Path:
    """Where the weights of the graph at `path` live when they are not inside it."""
    return path.with_name(path.name + DATA_SUFFIX)


def save_graph(
    proto: onnx.ModelProto, path: Path, inside: int | None = None, check: bool = True
) -> Path:
    """Writes `proto` to `path`, checked unless `check` is off (a quantiser's intermediate),
    its weights inside the file unless `outside`, else in `data_file(path)`. A file of
    weights an earlier graph left at `path` is removed first (onnx appends to it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data_file(path).unlink(missing_ok=True)
    if not outside(proto, inside):
        if check:
            onnx.checker.check_model(proto)
        onnx.save_model(proto, str(path))
        return path
    onnx.save_model(
        proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
        location=data_file(path).name, size_threshold=SMALL,
    )  # fmt: skip
    if check:  # by path: a proto past 2 GiB is not checked whole
        onnx.checker.check_model(str(path))
    return path


def copy_graph(source: Path, target: Path) -> Path:
    """The graph at `source`, with its file of weights where it has one, copied to `target`."""
    shutil.copyfile(source, target)
    data_file(target).unlink(missing_ok=True)
    if data_file(source).exists():  # under the name the graph gives it
        shutil.copyfile(data_file(source), data_file(target))
    return target


def share_weights(paths: Iterable[Path]) -> Path:
    """Rewrites the graphs at `paths` (of one folder) to read their weights past SMALL bytes
    from one file, SHARED in that folder, each distinct weight (by its bytes) stored once at
    an offset of ALIGNMENT; their files of weights of their own are removed. Returns that
    file. A graph is read and rewritten one at a time (a large step is gigabytes)."""
    paths = list(paths)
    folders = {p.parent for p in paths}
    if len(folders) != 1:
        raise ValueError(f"graphs of one folder share a file of weights, not of {len(folders)}")
    shared = folders.pop() / SHARED
    stored: dict[bytes, tuple[int, int]] = {}  # digest -> (offset, length)
    scratch = shared.with_name(shared.name + ".writing")
    with scratch.open("wb") as out:
        for path in paths:
            proto = onnx.load(str(path))  # its weights read in, from wherever they were
            for tensor in proto.graph.initializer:
                data = tensor.raw_data
                if len(data) <= SMALL:
                    continue
                digest = hashlib.sha256(data).digest()
                if digest not in stored:
                    out.write(b"\0" * (-out.tell() % ALIGNMENT))
                    stored[digest] = (out.tell(), len(data))
                    out.write(data)
                offset, length = stored[digest]
                tensor.ClearField("raw_data")
                tensor.data_location = onnx.TensorProto.EXTERNAL
                del tensor.external_data[:]
                for key, value in (("location", SHARED), ("offset", offset), ("length", length)):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = key, str(value)
            data_file(path).unlink(missing_ok=True)
            onnx.save_model(proto, str(path))
    scratch.replace(shared)
    return shared
