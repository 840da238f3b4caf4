"""SessionRunner: a session run plain or through IO binding, outputs on the device or the
host as asked, written into fed buffers, into kept host arrays, or skipped."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from service.runtime.session_runner import SessionRunner


@pytest.fixture(scope="module")
def session() -> ort.InferenceSession:
    """double = x + x, grown = buffer + x, total = sum of x's rows; x and buffer (rows, 3)."""
    f = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f, ["rows", 3])
    buffer = helper.make_tensor_value_info("buffer", f, ["rows", 3])
    outputs = [
        helper.make_tensor_value_info("double", f, ["rows", 3]),
        helper.make_tensor_value_info("grown", f, ["rows", 3]),
        helper.make_tensor_value_info("total", f, [3]),
    ]
    nodes = [
        helper.make_node("Add", ["x", "x"], ["double"]),
        helper.make_node("Add", ["buffer", "x"], ["grown"]),
        helper.make_node("ReduceSum", ["x"], ["total"], axes=[0], keepdims=0),
    ]
    graph = helper.make_graph(nodes, "runner", [x, buffer], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


X = np.arange(6, dtype=np.float32).reshape(2, 3)


def feeds(buffer=None) -> dict:
    return {"x": X.copy(), "buffer": np.ones((2, 3), np.float32) if buffer is None else buffer}


def test_the_plain_path_returns_numpy_outputs_in_order_and_skips_what_is_asked(session):
    runner = SessionRunner("cpu", io_binding=False)
    assert runner.outputs(session) == ["double", "grown", "total"]
    assert runner.outputs(session) is runner.outputs(session)  # read once
    double, grown, total = runner.run(session, feeds())
    np.testing.assert_array_equal(double, 2 * X)
    np.testing.assert_array_equal(grown, X + 1)
    np.testing.assert_array_equal(total, X.sum(0))
    double, grown, total = runner.run(session, feeds(), skip=("grown",))
    assert grown is None and isinstance(double, np.ndarray) and isinstance(total, np.ndarray)


def test_with_io_binding_outputs_stay_on_the_device_but_those_asked_on_the_host(session):
    runner = SessionRunner("cpu", io_binding=True)
    double, grown, total = runner.run(session, feeds(), on_host=("total",))
    assert isinstance(double, ort.OrtValue) and isinstance(grown, ort.OrtValue)
    assert isinstance(total, np.ndarray)
    np.testing.assert_array_equal(double.numpy(), 2 * X)
    np.testing.assert_array_equal(total, X.sum(0))
    # an OrtValue fed back in is bound as it is
    again = runner.run(session, {"x": double, "buffer": grown}, on_host=("double", "grown"))
    np.testing.assert_array_equal(again[0], 4 * X)
    np.testing.assert_array_equal(again[1], X + 1 + 2 * X)


@pytest.mark.parametrize("io_binding", [False, True])
def test_an_output_into_a_fed_buffer_is_written_there_and_returned_as_that_feed(
    session, io_binding
):
    runner = SessionRunner("cpu", io_binding)
    buffer = np.ones((2, 3), np.float32)
    fed = feeds(buffer)
    out = runner.run(session, fed, on_host=("double",), into={"grown": "buffer"})
    assert out[1] is buffer
    np.testing.assert_array_equal(buffer, X + 1)
    out = runner.run(session, fed, on_host=("double",), into={"grown": "buffer"})
    np.testing.assert_array_equal(buffer, 2 * X + 1)  # read and written in place again


def test_an_input_array_stays_bound_by_its_memory_so_writes_into_it_are_read(session):
    runner = SessionRunner("cpu", io_binding=True)
    fed = feeds()
    runner.run(session, fed, on_host=("double",))
    fed["x"][:] = 10  # the same array, written in place: not bound again, yet read
    double, _, _ = runner.run(session, fed, on_host=("double",))
    np.testing.assert_array_equal(double, np.full((2, 3), 20, np.float32))
    strided = np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2]  # copied when bound
    fed["x"] = strided
    np.testing.assert_array_equal(runner.run(session, fed, on_host=("double",))[0], 2 * strided)
    strided[:] = 1  # its copy is bound again at the next run
    np.testing.assert_array_equal(runner.run(session, fed, on_host=("double",))[0], 2 * strided)


@pytest.mark.parametrize("io_binding", [False, True])
def test_host_outputs_of_given_shapes_are_kept_arrays_copied_unless_borrowed(session, io_binding):
    """Through IO binding, or on the host where an output goes into a fed buffer (the plain
    run, without one, returns what onnxruntime allocates)."""
    runner = SessionRunner("cpu", io_binding)
    into = {} if io_binding else {"grown": "buffer"}
    shapes = {"double": (2, 3), "total": (3,)}
    host = ("double", "total")

    def run(fed, **given):
        return runner.run(session, fed, on_host=host, into=into, **given)

    first = run(feeds(), shapes=shapes, borrowed=("double",))
    second = run(feeds(), shapes=shapes, borrowed=("double",))
    assert first[0] is second[0]  # borrowed: the kept array itself
    assert first[2] is not second[2]  # copied out of it
    np.testing.assert_array_equal(second[0], 2 * X)
    np.testing.assert_array_equal(second[2], X.sum(0))
    assert run(feeds(), shapes=shapes, skip=("total",))[2] is None
    # another number of rows: a kept array of the new shape
    three = {"x": np.ones((3, 3), np.float32), "buffer": np.zeros((3, 3), np.float32)}
    out = run(three, shapes={"double": (3, 3)})
    np.testing.assert_array_equal(out[0], np.full((3, 3), 2, np.float32))
    plain = SessionRunner("cpu", io_binding=False)
    once = plain.run(session, feeds(), shapes=shapes, borrowed=("double",))
    assert once[0] is not plain.run(session, feeds(), shapes=shapes, borrowed=("double",))[0]


def test_threads_running_one_session_each_get_their_own_outputs(session):
    """An engine's helper graphs run on the scheduler's thread and on the encoder thread at
    once (a step's controlled rows taken while an admission's rows are placed): each run
    reads its own inputs and returns its own outputs."""
    import threading

    runner = SessionRunner("cpu", io_binding=True)
    wrong: list[str] = []

    def run(value: float) -> None:
        x = np.full((20_000, 3), value, dtype=np.float32)
        for _ in range(200):
            try:
                double = runner.run(session, {"x": x, "buffer": x}, on_host=("double",))[0]
            except RuntimeError as error:  # another thread's binding changed under the run
                wrong.append(str(error))
                continue
            if not np.all(double == 2 * value):
                wrong.append(f"another thread's output: {double[0]}")

    threads = [threading.Thread(target=run, args=(float(v),)) for v in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong, wrong[:3]
