"""The model-file convention: ``autoshard.models.pyfile.load_file`` and the examples that document it."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from autoshard.errors import AutoshardError, ModelSourceError, UsageError, UserCodeError
from autoshard.models import load_source
from autoshard.models.pyfile import load_file
from autoshard.models.source import call_model, default_loss

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

MINIMAL = """
    import torch
    from torch import nn

    def model():
        return nn.Linear(4, 2)

    def batch(batch_size):
        return torch.randn(batch_size, 4)
"""


def line_of(source: str, marker: str) -> int:
    """1-based number of the first line of the written (dedented) ``source`` containing ``marker``."""
    lines = textwrap.dedent(source).lstrip("\n").splitlines()
    return next(number for number, line in enumerate(lines, start=1) if marker in line)


# --- the examples ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("example", ["mlp", "gpt"])
def test_example_builds_batches_and_trains_one_step(example: str, train_step: Callable[..., torch.Tensor]) -> None:
    source = load_source(EXAMPLES / example / "model.py")
    torch.manual_seed(0)
    module = source.build()
    loss = train_step(source, module, source.batch(2))
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert all(p.grad is not None for p in module.parameters())
    params = list(module.parameters())
    optimizer = source.optimizer_fn(params) if source.optimizer_fn else torch.optim.AdamW(params)
    optimizer.step()


@pytest.mark.parametrize(
    ("example", "accepts_seq_len", "default_seq_len", "max_seq_len", "has_loss", "has_optimizer"),
    [("mlp", False, None, None, False, False), ("gpt", True, 256, 256, True, True)],
)
def test_example_declares_what_the_convention_reads(
    example: str,
    accepts_seq_len: bool,
    default_seq_len: int | None,
    max_seq_len: int | None,
    has_loss: bool,
    has_optimizer: bool,
) -> None:
    source = load_source(EXAMPLES / example / "model.py")
    assert (source.name, source.kind, source.user_file) == (example, "file", str(EXAMPLES / example / "model.py"))
    assert (source.accepts_seq_len, source.default_seq_len, source.max_seq_len) == (
        accepts_seq_len,
        default_seq_len,
        max_seq_len,
    )
    assert (source.loss_fn is not None, source.optimizer_fn is not None) == (has_loss, has_optimizer)


def test_gpt_example_has_10_to_30_million_parameters_and_honours_seq_len() -> None:
    source = load_source(EXAMPLES / "gpt" / "model.py")
    with torch.device("meta"):
        module = source.build()
        tokens = source.batch(2, seq_len=64)
    unique = {id(p): p.numel() for p in module.parameters()}
    assert 10e6 <= sum(unique.values()) <= 30e6
    assert tokens.shape == (2, 64)
    with pytest.raises(UsageError, match="exceeds the longest sequence"):
        source.batch(2, seq_len=257)


@pytest.mark.parametrize("example", ["mlp", "gpt"])
def test_example_traces_under_fake_tensors(example: str) -> None:
    source = load_source(EXAMPLES / example / "model.py")
    with FakeTensorMode():
        module = source.build()
        batch = source.batch(4)
        loss = (source.loss_fn or default_loss)(call_model(module, batch), batch)
        loss.backward()
    assert isinstance(loss, FakeTensor)
    assert all(isinstance(p.grad, FakeTensor) for p in module.parameters())


# --- reading the convention --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returned", "forward"),
    [
        ("torch.randn(batch_size, 4)", "def forward(self, x): return self.lin(x)"),
        ("(torch.randn(batch_size, 4), torch.ones(batch_size, 2))", "def forward(self, x, w): return self.lin(x) * w"),
        ("[torch.randn(batch_size, 4)]", "def forward(self, x): return self.lin(x)"),
        ("{'x': torch.randn(batch_size, 4), 'scale': 2.0}", "def forward(self, x, scale): return self.lin(x) * scale"),
    ],
    ids=["tensor", "tuple", "list", "dict"],
)
def test_batch_is_fed_as_tensor_star_args_or_kwargs(
    returned: str, forward: str, write_model: Callable[..., Path], train_step: Callable[..., torch.Tensor]
) -> None:
    path = write_model(
        f"""
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 2)
            {forward}

        def model():
            return Net()

        def batch(batch_size):
            return {returned}
        """
    )
    source = load_file(path)
    loss = train_step(source, source.build(), source.batch(3))
    assert loss.ndim == 0


INPUTS_AND_TARGETS = """
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            return self.lin(x)

    def model():
        return Net()

    def batch(batch_size):
        return torch.randn(batch_size, 4), torch.randint(0, 3, (batch_size,))

    def loss(output, batch):
        return F.cross_entropy(output, batch[1])
"""


def test_a_tuple_with_targets_feeds_the_forward_its_inputs_and_the_loss_the_whole_batch(
    write_model: Callable[..., Path], train_step: Callable[..., torch.Tensor]
) -> None:
    """``(x, y)`` with ``forward(self, x)``, the plain PyTorch loop's shape: ``model(x)``, ``loss(output, batch)``
    (was ``model(x, y)``: "forward() takes 2 positional arguments but 3 were given")."""
    source = load_file(write_model(INPUTS_AND_TARGETS))
    torch.manual_seed(0)
    module, data = source.build(), source.batch(5)
    loss = train_step(source, module, data)
    with torch.no_grad():
        assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(module(data[0]), data[1])))


DICT_WITH_TARGET = """
    import torch
    import torch.nn.functional as F

    def model():
        return torch.nn.Linear(4, 3)

    def batch(batch_size):
        return {"input": torch.randn(batch_size, 4), "y": torch.randint(0, 3, (batch_size,))}

    def loss(output, batch):
        return F.cross_entropy(output, batch["y"])
"""


def test_a_dict_batch_keeps_its_targets_for_the_loss_only(
    write_model: Callable[..., Path], train_step: Callable[..., torch.Tensor]
) -> None:
    """``{"input", "y"}`` with ``forward(input)``: ``y`` reached the forward ("unexpected keyword argument 'y'")
    from a model file, where a module passed to ``fit()`` had it dropped (a probe's GNN file)."""
    source = load_file(write_model(DICT_WITH_TARGET))
    torch.manual_seed(0)
    module, data = source.build(), source.batch(5)
    loss = train_step(source, module, data)
    with torch.no_grad():
        assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(module(data["input"]), data["y"])))


def test_the_inputs_are_counted_on_the_users_forward_under_ddp(write_model: Callable[..., Path]) -> None:
    """DDP's ``forward(*inputs, **kwargs)`` passes everything to ``.module``: the count is the user's forward's,
    and a module of the user's own that keeps another as ``.module`` is asked itself."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from autoshard.models.step import FileCall

    source = load_file(write_model(INPUTS_AND_TARGETS))
    data = source.batch(2)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert FileCall()(DistributedDataParallel(source.build()), data).shape == (2, 3)
    finally:
        dist.destroy_process_group()

    class Both(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = torch.nn.Linear(4, 3)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.module(x)[torch.arange(len(y)), y]

    assert FileCall()(Both(), data).shape == (2,)


@pytest.mark.parametrize(
    ("signature", "accepts_seq_len", "default_seq_len"),
    [
        ("batch_size", False, None),
        ("batch_size, seq_len=128", True, 128),
        ("batch_size, *, seq_len=64", True, 64),
        ("batch_size, seq_len=None", True, None),
        ("batch_size, **options", True, None),
        ("batch_size=8", False, None),
    ],
)
def test_seq_len_support_is_read_from_the_batch_signature(
    signature: str, accepts_seq_len: bool, default_seq_len: int | None, write_model: Callable[..., Path]
) -> None:
    path = write_model(
        f"""
        import torch

        def model():
            return torch.nn.Linear(4, 2)

        def batch({signature}):
            return torch.randn(2, 4)
        """
    )
    source = load_file(path)
    assert (source.accepts_seq_len, source.default_seq_len) == (accepts_seq_len, default_seq_len)


@pytest.mark.parametrize(
    ("signature", "seq_len", "received"),
    [
        ("batch_size", None, {"batch_size": 3}),
        ("batch_size, seq_len=16", None, {"batch_size": 3, "seq_len": 16}),
        ("batch_size, seq_len=16", 8, {"batch_size": 3, "seq_len": 8}),
        ("batch_size, seq_len=None", None, {"batch_size": 3, "seq_len": None}),
        ("batch_size, **kw", 8, {"batch_size": 3, "kw": {"seq_len": 8}}),
    ],
)
def test_seq_len_is_passed_only_when_batch_accepts_it(
    signature: str, seq_len: int | None, received: dict[str, object], write_model: Callable[..., Path]
) -> None:
    path = write_model(
        f"""
        import torch
        CALLS = []

        def model():
            return torch.nn.Linear(4, 2)

        def batch({signature}):
            CALLS.append(dict(locals()))
            return torch.randn(batch_size, 4)
        """
    )
    source = load_file(path)
    source.batch(3, seq_len)
    assert source.batch_fn.__globals__["CALLS"] == [received]


def test_seq_len_given_to_a_batch_without_it_is_a_usage_error(write_model: Callable[..., Path]) -> None:
    source = load_file(write_model(MINIMAL))
    with pytest.raises(UsageError, match="takes no seq_len argument"):
        source.batch(2, seq_len=16)


def test_loss_and_optimizer_are_taken_from_the_file(write_model: Callable[..., Path]) -> None:
    path = write_model(
        MINIMAL
        + """
    def loss(output, batch):
        return output.square().sum()

    def optimizer(params):
        return torch.optim.SGD(params, lr=0.1)
    """
    )
    source = load_file(path)
    module = source.build()
    batch = source.batch(2)
    assert source.loss_fn is not None and source.optimizer_fn is not None
    assert torch.equal(source.loss_fn(module(batch), batch), module(batch).square().sum())
    assert isinstance(source.optimizer_fn(module.parameters()), torch.optim.SGD)


@pytest.mark.parametrize(
    ("folder", "name", "expected"), [("mynet", "model.py", "mynet"), ("mynet", "resnet_tiny.py", "resnet_tiny")]
)
def test_name_is_the_stem_or_the_folder_of_a_model_py(
    folder: str, name: str, expected: str, write_model: Callable[..., Path]
) -> None:
    path = write_model(MINIMAL, name=name, folder=folder)
    source = load_file(path)
    assert (source.name, source.origin, source.user_file) == (expected, str(path), str(path))


def test_max_seq_len_is_read_from_the_module(write_model: Callable[..., Path]) -> None:
    path = write_model(
        """
        import torch
        MAX_SEQ_LEN = 64

        def model():
            return torch.nn.Linear(4, 2)

        def batch(batch_size, seq_len=32):
            return torch.randn(batch_size, seq_len, 4)
        """
    )
    source = load_file(path)
    assert (source.default_seq_len, source.max_seq_len) == (32, 64)
    with pytest.raises(UsageError, match="--seq-len 64 or less"):
        source.batch(1, seq_len=65)


# --- import hygiene ----------------------------------------------------------------------------------------------


def test_import_leaves_sys_path_sys_modules_and_cwd_as_they_were(write_model: Callable[..., Path]) -> None:
    write_model("HELPER = 3\n", name="helpers_for_autoshard_test.py")
    path = write_model(
        """
        import torch
        from helpers_for_autoshard_test import HELPER
        RAN_MAIN = False

        def model():
            return torch.nn.Linear(HELPER, 2)

        def batch(batch_size):
            return torch.randn(batch_size, HELPER)

        if __name__ == "__main__":
            RAN_MAIN = True
        """
    )
    path_before, modules_before, cwd_before = list(sys.path), set(sys.modules), os.getcwd()
    source = load_file(path)
    assert source.build().in_features == 3
    assert sys.path == path_before
    assert set(sys.modules) - modules_before == set()
    assert os.getcwd() == cwd_before
    assert source.build_fn.__globals__["RAN_MAIN"] is False


def test_two_model_files_get_their_own_same_named_sibling(write_model: Callable[..., Path]) -> None:
    uses_sibling = """
        import torch
        from layers import WIDTH

        def model():
            return torch.nn.Linear(WIDTH, 1)

        def batch(batch_size):
            return torch.randn(batch_size, WIDTH)
        """
    for folder, width in [("a", 3), ("b", 5)]:
        write_model(f"WIDTH = {width}\n", name="layers.py", folder=folder)
        write_model(uses_sibling, folder=folder)
    first = load_file(write_model(uses_sibling, folder="a"))
    second = load_file(write_model(uses_sibling, folder="b"))
    assert (first.build().in_features, second.build().in_features) == (3, 5)


def test_packages_installed_under_the_model_folder_stay_imported(
    write_model: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A virtualenv next to the model file: its packages are not siblings and must not be forgotten after import.
    vendored = write_model("VALUE = 1\n", name="autoshard_test_vendored.py", folder="pkg/.venv/site-packages")
    monkeypatch.syspath_prepend(str(vendored.parent))
    path = write_model("import autoshard_test_vendored\n" + textwrap.dedent(MINIMAL))
    try:
        load_file(path)
        assert "autoshard_test_vendored" in sys.modules
    finally:
        sys.modules.pop("autoshard_test_vendored", None)


def test_each_load_imports_the_file_afresh(write_model: Callable[..., Path]) -> None:
    path = write_model(MINIMAL)
    first, second = load_file(path), load_file(path)
    assert first.build_fn is not second.build_fn
    assert first.build_fn.__module__ != second.build_fn.__module__


# --- bad model files ---------------------------------------------------------------------------------------------

SYNTAX_ERROR = """
    import torch

    def model(:
        return torch.nn.Linear(4, 2)
"""
MISSING_PACKAGE = """
    import torch
    import autoshard_no_such_package_xyz

    def model():
        return torch.nn.Linear(4, 2)
"""
RAISES_AT_IMPORT = """
    import torch

    WIDTH = {"a": 1}["b"]
"""
EXITS_AT_IMPORT = """
    import sys

    sys.exit(2)
"""


def test_a_file_parsing_its_arguments_at_import_reads_none_of_autoshards(tmp_path, monkeypatch, capsys) -> None:
    # As `python model.py` would run it: its defaults apply, and a usage line names the file.
    monkeypatch.setattr("sys.argv", ["autoshard", "profile", "model.py", "--batch-size", "4"])
    parses = "import argparse\n" + "ARGS = argparse.ArgumentParser().parse_args()\n"
    (tmp_path / "model.py").write_text(parses + textwrap.dedent(MINIMAL), encoding="utf-8")
    assert load_file(tmp_path / "model.py").build()(torch.ones(1, 4)).shape == (1, 2)
    (tmp_path / "needs.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', required=True)\np.parse_args()\n",
        encoding="utf-8")
    with pytest.raises(UserCodeError, match=r"called sys\.exit"):
        load_file(tmp_path / "needs.py")
    assert "usage: needs.py [-h] --lr LR" in capsys.readouterr().err
    assert sys.argv[0] == "autoshard"  # given back


@pytest.mark.parametrize(
    ("source", "error", "expected"),
    [
        (SYNTAX_ERROR, UserCodeError, ["Syntax error in {path}:3", "def model(:"]),
        (
            MISSING_PACKAGE,
            UserCodeError,
            ["ModuleNotFoundError at {path}:2", "Install 'autoshard_no_such_package_xyz'"],
        ),
        (RAISES_AT_IMPORT, UserCodeError, ["raised KeyError at {path}:3: 'b'"]),
        (EXITS_AT_IMPORT, UserCodeError, ["called sys.exit() at {path}:3", "if __name__ == '__main__':"]),
        ("import torch\ndef batch(batch_size): ...\n", ModelSourceError, ["defines no `model()` (found: batch())"]),
        ("def model(): ...\n", ModelSourceError, ["defines no `batch()` (found: model())"]),
        ("X = 1\n", ModelSourceError, ["{path} defines neither `model()` nor `batch()`."]),
        (
            "from torch import nn\nclass Net(nn.Module): pass\n",
            ModelSourceError,
            ["defines neither", "Add `def model(): return Net()` and `def batch(batch_size): ...`."],
        ),
        (  # the user's own name for the factory
            "from torch import nn\ndef build_model(): return nn.Linear(2, 2)\ndef batch(batch_size): ...\n",
            ModelSourceError,
            ["defines no `model()`", "Add `def model(): return build_model()`, or rename build_model to model."],
        ),
        (  # several classes: which one is the user's to say
            "from torch import nn\nclass Big(nn.Module): pass\nclass Small(nn.Module): pass\ndef batch(b): ...\n",
            ModelSourceError,
            ["Add `def model():` returning the one of Big, Small to train, e.g. `return Big()`."],
        ),
        ("model = 3\ndef batch(batch_size): ...\n", ModelSourceError, ["`model` in {path} is a int, not a function"]),
        (
            "import torch\nmodel = torch.nn.Linear(2, 2)\ndef batch(batch_size): ...\n",
            ModelSourceError,
            ["is a module instance (Linear)", "def model(): return Linear(...)"],
        ),
        (
            "def model(width): ...\ndef batch(batch_size): ...\n",
            ModelSourceError,
            ["model(width) in {path} cannot be called as model()", "give any other parameter a default"],
        ),
        (
            "def model(): ...\ndef batch(): ...\n",
            ModelSourceError,
            ["batch() in {path} cannot be called as batch(batch_size)"],
        ),
        (
            "def model(): ...\ndef batch(batch_size, seq_len): ...\n",
            ModelSourceError,
            ["requires seq_len but gives it no default", "def batch(batch_size, seq_len=512):"],
        ),
        (
            "def model(): ...\ndef batch(batch_size, seq_len='long'): ...\n",
            ModelSourceError,
            ["The seq_len default of batch() in {path} must be a positive int, but got 'long'"],
        ),
        (
            "MAX_SEQ_LEN = 16\ndef model(): ...\ndef batch(batch_size, seq_len=32): ...\n",
            ModelSourceError,
            ["defaults to seq_len=32, above MAX_SEQ_LEN = 16"],
        ),
        (
            "MAX_SEQ_LEN = 0\ndef model(): ...\ndef batch(batch_size): ...\n",
            ModelSourceError,
            ["MAX_SEQ_LEN in {path} must be a positive int, but got 0"],
        ),
        (
            "def model(): ...\ndef batch(batch_size): ...\ndef loss(output): ...\n",
            ModelSourceError,
            ["loss(output) in {path} cannot be called as loss(output, batch)"],
        ),
        (
            "def model(): ...\ndef batch(batch_size): ...\noptimizer = 'adam'\n",
            ModelSourceError,
            ["`optimizer` in {path} is a str, not a function"],
        ),
    ],
    ids=[
        "syntax-error",
        "missing-package",
        "raises-at-import",
        "sys-exit-at-import",
        "no-model",
        "no-batch",
        "neither",
        "class-but-no-model-function",
        "factory-of-another-name",
        "several-classes",
        "model-not-callable",
        "model-is-an-instance",
        "model-needs-arguments",
        "batch-takes-no-batch-size",
        "seq-len-without-default",
        "seq-len-default-not-int",
        "default-above-max-seq-len",
        "max-seq-len-not-positive",
        "loss-wrong-signature",
        "optimizer-not-callable",
    ],
)
def test_bad_model_file_gives_a_precise_short_error(
    source: str, error: type[AutoshardError], expected: list[str], write_model: Callable[..., Path]
) -> None:
    path = write_model(source)
    with pytest.raises(error) as info:
        load_file(path)
    message = str(info.value)
    assert type(info.value) is error
    for text in expected:
        assert text.format(path=path) in message
    assert message.count("\n") <= 1, message


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: tmp / "absent.py", "absent.py: no such file."),
        (lambda tmp: tmp, "is not a file."),
        (lambda tmp: (tmp / "model.txt").write_text("x") and tmp / "model.txt", "is not a Python file"),
    ],
    ids=["missing", "directory", "not-python"],
)
def test_unusable_path_is_a_model_source_error(
    make: Callable[[Path], Path], expected: str, tmp_path: Path
) -> None:
    with pytest.raises(ModelSourceError, match=expected.replace(".", r"\.")):
        load_file(make(tmp_path))


@pytest.mark.parametrize(("name", "expected"), [
    ("", "the model source is an empty name."),  # Path("") is the current directory: it said " is a directory..."
    ("/dev/null", "/dev/null is not a regular file"),  # it said "no such file"
])
def test_an_empty_name_and_a_device_are_refused_as_what_they_are(name: str, expected: str) -> None:
    with pytest.raises(ModelSourceError, match=expected.replace(".", r"\.")):
        load_source(name)


def test_a_path_through_a_directory_the_user_cannot_enter_is_refused_in_a_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pathlib raises PermissionError from is_dir() below a directory of mode 000 (as a user, not root): it
    reached the CLI as an internal error (a bad-input probe). The file system answers here as it did there."""
    def denied(self: Path) -> bool:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_dir", denied)
    with pytest.raises(ModelSourceError, match="permission denied"):
        load_source(tmp_path / "locked" / "model.py")


def test_error_location_points_at_user_code_not_autoshard(write_model: Callable[..., Path]) -> None:
    source = MISSING_PACKAGE
    path = write_model(source)
    with pytest.raises(UserCodeError) as info:
        load_file(path)
    assert info.value.location == f"{path}:{line_of(source, 'autoshard_no_such_package_xyz')}"


def test_syntax_error_in_a_sibling_points_at_the_sibling(write_model: Callable[..., Path]) -> None:
    sibling = write_model("def broken(:\n    pass\n", name="parts.py")
    path = write_model("from parts import broken\n")
    with pytest.raises(UserCodeError, match=f"Syntax error in {sibling}:1"):
        load_file(path)


# --- model() and batch() misbehaving at call time (reported by ModelSource) ---------------------------------------

CALL_TIME = """
    import torch

    def model():
        {model_body}

    def batch(batch_size):
        {batch_body}
"""


@pytest.mark.parametrize(
    ("model_body", "batch_body", "call", "expected"),
    [
        ("raise RuntimeError('no weights')", "return torch.ones(1)", "build", "model() raised RuntimeError at {at}"),
        ("return 'a string'", "return torch.ones(1)", "build", "model() in {path} returned str, expected a torch"),
        ("return torch.nn.Linear(1, 1)", "return torch.ones(2)[7]", "batch", "batch() raised IndexError at {at}"),
        ("return torch.nn.Linear(1, 1)", "return 42", "batch", "batch() in {path} returned int"),
        ("return torch.nn.Linear(1, 1)", "return {'x': 1}", "batch", "returned a dict with no tensor in it"),
    ],
    ids=["model-raises", "model-returns-str", "batch-raises", "batch-returns-int", "batch-without-tensors"],
)
def test_model_and_batch_misbehaving_become_user_code_errors(
    model_body: str, batch_body: str, call: str, expected: str, write_model: Callable[..., Path]
) -> None:
    path = write_model(CALL_TIME.format(model_body=model_body, batch_body=batch_body))
    source = load_file(path)
    with pytest.raises(UserCodeError) as info:
        source.build() if call == "build" else source.batch(2)
    at = f"{path}:{line_of(CALL_TIME, '{model_body}' if call == 'build' else '{batch_body}')}"
    assert expected.format(path=path, at=at) in str(info.value)


def test_a_compiled_module_from_model_is_refused_in_the_files_terms(write_model: Callable[..., Path]) -> None:
    """torch.compile's wrapper takes ``*args`` and would be traced through dynamo under fake tensors: refused when
    built, with the fix (``fit()`` given a compiled module object trains the module it wraps, with a note)."""
    source = load_file(write_model(MINIMAL.replace("return nn.Linear(4, 2)", "return torch.compile(nn.Linear(4, 2))")))
    with pytest.raises(UserCodeError, match="returned a torch.compile'd module") as info:
        source.build()
    assert "Return the module uncompiled" in str(info.value.hint)


def test_a_directory_holding_a_model_file_is_pointed_at_it(tmp_path: Path) -> None:
    from autoshard.models import load_source

    (tmp_path / "model.py").write_text("def model(): ...\ndef batch(batch_size): ...\n", encoding="utf-8")
    with pytest.raises(ModelSourceError, match="is a directory without a config.json") as info:
        load_source(str(tmp_path))
    assert info.value.hint == f"Point autoshard at {tmp_path / 'model.py'}."


def test_a_batch_that_reads_a_value_is_told_fake_tensors_hold_none(write_model) -> None:
    """``.item()`` in batch() said only "raised DataDependentOutputException ...: aten._local_scalar_dense.default"
    with "Fix the error in your model file"; in the forward it was already told (profiler/guard.py)."""
    import autoshard

    path = write_model(MINIMAL.replace("return torch.randn(batch_size, 4)",
                                       "x = torch.randn(batch_size, 4)\n        scale = x.abs().max().item()\n"
                                       "        return x / scale"))
    with pytest.raises(UserCodeError, match="batch\\(\\) raised DataDependentOutputException") as info:
        autoshard.profile(str(path), batch_size=2)
    assert "fake tensors, which hold no values" in str(info.value.hint) and ".item()" in str(info.value.hint)


QUANTIZED_4BIT = """
    import torch
    import bitsandbytes as bnb

    def model():
        layer = bnb.nn.Linear4bit(8, 8, bias=False, compute_dtype=torch.float32, quant_type="nf4")
        layer.weight = bnb.nn.Params4bit(torch.randn(8, 8), requires_grad=False, quant_type="nf4")
        return torch.nn.Sequential(layer, torch.nn.Linear(8, 2))

    def batch(batch_size):
        return torch.randn(batch_size, 8)
"""


def test_a_quantized_base_is_said_to_be_what_cannot_be_planned(write_model: Callable[..., Path]) -> None:
    """A QLoRA-style 4-bit base: "Fix the error in your model file" blamed a file that was fine (a fine-tuning
    probe)."""
    pytest.importorskip("bitsandbytes")
    from autoshard import profile

    with pytest.raises(UserCodeError) as info:
        profile(str(write_model(QUANTIZED_4BIT)), batch_size=2, target="cpu", precision="32-true")
    assert "Params4bit" in info.value.message and "\n" not in info.value.message
    assert "autoshard cannot plan a quantized base model" in (info.value.hint or "")
    assert "Fix the error in your model file" not in (info.value.hint or "")
