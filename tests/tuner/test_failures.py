"""Classifying a failed trial from what its workers recorded (``error-rank<N>.json``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autoshard.errors import UserCodeError, WorkerError, WorkerTimeout
from autoshard.runtime import supervisor
from autoshard.tuner.failures import classify, classify_record, user_error
from autoshard.tuner.result import FailureClass

CUDA_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
            "1.06 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in use. Of the "
            "allocated memory 75.50 GiB is allocated by PyTorch, and 1.12 GiB is reserved by PyTorch but "
            "unallocated.")
# torch 2.13 on Linux, from posix_memalign (c10/core/impl/alloc_cpu.cpp), as `torch.empty(1 << 50)` raises it.
CPU_OOM_POSIX = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                 "tried to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate memory)")
# The same allocator where a plain malloc returns NULL (the _MSC_VER branch of alloc_cpu.cpp).
CPU_OOM_NULL = ("[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: not enough memory: you tried to "
                "allocate 1099511627776 bytes.")
GLOO_PEER_LOST = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:12345"
NCCL_ERROR = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system "
              "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclSystemError: System call "
              "(e.g. socket, malloc) or external library call failed or device error.")


@pytest.mark.parametrize(
    ("kind", "message", "expected"),
    [
        ("OutOfMemoryError", CUDA_OOM, FailureClass.OOM),
        ("MemoryError", "", FailureClass.OOM),
        ("RuntimeError", "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
         FailureClass.OOM),
        ("RuntimeError", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
         FailureClass.OOM),
        ("RuntimeError", CPU_OOM_POSIX, FailureClass.OOM),
        ("RuntimeError", CPU_OOM_NULL, FailureClass.OOM),
        # loop.py wraps a first-batch failure that is not torch's OutOfMemoryError, such as the CPU allocator's
        # RuntimeError, in UserCodeError: it is still the batch not fitting.
        ("UserCodeError", (f"the model failed on the first batch (tensor(1024, 32) int64): RuntimeError: "
                          f"{CPU_OOM_POSIX}"), FailureClass.OOM),
        ("RuntimeError", GLOO_PEER_LOST, FailureClass.COMMUNICATION),
        ("DistBackendError", NCCL_ERROR, FailureClass.COMMUNICATION),
        ("DistNetworkError", "failed to recv, got 0 bytes", FailureClass.COMMUNICATION),
        ("DistStoreError", "Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
         FailureClass.COMMUNICATION),
        # A peer lost during the first forward (FSDP's all-gather) reaches the tuner wrapped as user code.
        ("UserCodeError", (f"the model failed on the first batch (tensor(8, 32) int64): RuntimeError: "
                           f"{GLOO_PEER_LOST}"), FailureClass.COMMUNICATION),
        ("UserCodeError", ("the loss failed on the first batch: TypeError: cross_entropy() missing 1 required "
                          "positional argument: 'target'."), FailureClass.USER_CODE),
        ("ModelSourceError", "model.py defines no build_model()", FailureClass.USER_CODE),
        ("ValueError", "Expected input batch_size (16) to match target batch_size (8).", FailureClass.CRASH),
        ("KeyError", "'step_time_s'", FailureClass.CRASH),
    ],
)
def test_classify_record(kind: str, message: str, expected: FailureClass) -> None:
    assert classify_record({"type": kind, "message": message}) is expected


def test_a_record_without_type_or_message_is_a_crash() -> None:
    assert classify_record({}) is FailureClass.CRASH


def test_a_timeout_is_classified_timeout_whatever_the_ranks_recorded(tmp_path: Path) -> None:
    supervisor.write_error(tmp_path, 0, MemoryError())
    error = WorkerTimeout("the workers did not finish within the time limit and were stopped.")
    assert classify(error, tmp_path, world_size=2) == (FailureClass.TIMEOUT, error.message)


@pytest.mark.parametrize(
    ("first", "later", "expected"),
    [
        ((1, MemoryError("host memory exhausted")), (0, RuntimeError(GLOO_PEER_LOST)), FailureClass.OOM),
        ((0, RuntimeError(GLOO_PEER_LOST)), (1, MemoryError("host memory exhausted")), FailureClass.COMMUNICATION),
        ((1, UserCodeError("the model failed on the first batch: ValueError: bad shape")),
         (0, RuntimeError(GLOO_PEER_LOST)), FailureClass.USER_CODE),
    ],
    ids=["oom-on-rank1-first", "peer-lost-on-rank0-first", "user-code-on-rank1-first"],
)
def test_the_earliest_rank_record_decides(tmp_path: Path, first: tuple[int, BaseException],
                                          later: tuple[int, BaseException], expected: FailureClass) -> None:
    supervisor.write_error(tmp_path, *first)
    time.sleep(0.02)
    supervisor.write_error(tmp_path, *later)
    failure, message = classify(WorkerError("rank failed"), tmp_path, world_size=2)
    assert failure is expected
    rank, exc = first
    said = "out of memory" if expected is FailureClass.OOM else type(exc).__name__  # out of memory in its words
    assert message.startswith(f"rank {rank}: {said}: ")
    assert "\n" not in message


def test_the_message_is_one_line_and_bounded(tmp_path: Path) -> None:
    supervisor.write_error(tmp_path, 0, RuntimeError("line one\nline two " + "x" * 1000))
    failure, message = classify(WorkerError("rank 0 failed"), tmp_path, world_size=1)
    assert failure is FailureClass.CRASH
    assert message.startswith("rank 0: RuntimeError: line one line two x")
    assert "\n" not in message and len(message) == 300 and message.endswith("…")


def test_no_records_is_a_crash_with_the_supervisors_message(tmp_path: Path) -> None:
    error = WorkerError("rank 1 was killed by signal 9 without reporting an error; the other workers were "
                        "stopped.\n--- its output (tail) ---\nKilled")
    assert classify(error, tmp_path, world_size=2) == (
        FailureClass.CRASH,
        ("rank 1 was killed by signal 9 without reporting an error; the other workers were stopped. "
        "--- its output (tail) --- Killed"),
    )


def test_records_of_ranks_beyond_the_world_size_are_ignored(tmp_path: Path) -> None:
    supervisor.write_error(tmp_path, 2, MemoryError("from another, larger run"))
    assert classify(WorkerError("rank 0 failed"), tmp_path, world_size=2)[0] is FailureClass.CRASH


def _raised(tmp_path: Path, chain: list[tuple[str, str]]) -> BaseException:
    """The exception raised by calling, in turn, functions compiled as if they lived in the files named in
    ``chain`` (``(file, body)``, outermost first; the innermost body raises)."""
    namespace: dict[str, object] = {}
    callee = "None"
    for i, (file, body) in reversed(list(enumerate(chain))):
        code = f"def f{i}():\n    inner = {callee}\n    {body}\n"
        exec(compile(code, str(tmp_path / file) if not file.startswith("/") else file, "exec"), namespace)
        callee = f"f{i}"
    try:
        namespace["f0"]()  # type: ignore[operator]
    except Exception as e:  # noqa: BLE001 — what each case raises
        return e
    raise AssertionError("nothing raised")


@pytest.mark.parametrize(
    ("chain", "blamed"),
    [
        ([("model.py", "raise ValueError('bad shape')")], True),
        ([("model.py", "inner()"), ("lib/torch/nn/functional.py", "raise ValueError('bad shape')")], True),
        # a sharding hook inside the user's forward failed: not their code
        ([("model.py", "inner()"), ("/x/torch/distributed/fsdp/hook.py", "raise RuntimeError('bad DTensor')")],
         False),
        ([("other.py", "raise ValueError('bad shape')")], False),
        ([("model.py", "raise MemoryError()")], False),  # out of memory is never the user's
        ([("model.py", "raise RuntimeError('" + GLOO_PEER_LOST + "')")], False),
    ],
    ids=["raised-in-their-file", "raised-by-a-library-they-called", "raised-by-torch-distributed-below-them",
         "not-their-file", "out-of-memory", "lost-peer"],
)
def test_an_error_from_the_users_file_is_theirs_with_its_line(tmp_path: Path, chain: list[tuple[str, str]],
                                                               blamed: bool) -> None:
    error = user_error(_raised(tmp_path, chain), [str(tmp_path / "model.py")], step=3)
    if not blamed:
        assert error is None
        return
    assert isinstance(error, UserCodeError) and error.location == f"{tmp_path / 'model.py'}:3"
    assert error.message.startswith(f"{error.location}: your code raised ValueError at step 3: bad shape")
    assert classify_record({"type": type(error).__name__, "message": error.message}) is FailureClass.USER_CODE


def test_a_first_step_user_code_error_gets_the_line_it_came_from(tmp_path: Path) -> None:
    cause = _raised(tmp_path, [("model.py", "raise ValueError('bad shape')")])
    try:
        raise UserCodeError("the model failed on the first batch: ValueError: bad shape") from cause
    except UserCodeError as e:
        error = user_error(e, [str(tmp_path / "model.py")], step=1)
    assert error is not None
    assert error.message == f"{tmp_path / 'model.py'}:3: the model failed on the first batch: ValueError: bad shape"
    located = UserCodeError("model() raised ValueError at model.py:9: bad", location="model.py:9")
    assert user_error(located, [str(tmp_path / "model.py")], step=1) is None  # named already: recorded as it is
