"""Import auto_LiRPA 0.3 on torch 2 / numpy 2, with the runtime patches of MATH.md section 8.

auto_LiRPA 0.3 (the only release on PyPI) predates numpy 2 and torch 2.x. Importing this module:

1. checks that auto_LiRPA is installed at exactly version ``REQUIRED_VERSION`` (else `LirpaUnavailableError`,
   a `CertifyError`, with the install command);
2. before ``import auto_LiRPA``, supplies what has gone from its dependencies:
   - ``numpy.lib.arraysetops`` (removed in numpy 2): a module with ``isin = numpy.isin``;
   - ``torch.onnx.symbolic_helper._set_opset_version``: sets the opset on the TorchScript exporter's globals;
   - ``torch._C.Node.__getitem__``: ``node[k] = getattr(node, node.kindOf(k))(k)`` (attribute access by name);
3. after the import, patches three methods of auto_LiRPA's classes (never its files):
   - ``BoundedModule._named_members`` accepts and drops torch 2's ``remove_duplicate=`` keyword;
   - ``BoundLinear._preprocess`` returns contiguous operands (a transposed constant weight is otherwise viewed
     with an incompatible stride: "view size is not compatible");
   - **soundness**: ``BoundReduceMax.bound_backward`` with a fixed maximum index scatters the coefficients of
     every specification row. In 0.3 the index has a leading dimension of 1, and ``Tensor.scatter_`` does not
     broadcast, so only spec row 0 is written and the other rows' coefficients are silently dropped: CROWN then
     returns bounds that the function violates (fixed upstream in 0.4). `reducemax_fix` switches this patch off
     and on again, for the test that shows the unpatched behaviour is unsound.

Every patch is idempotent and adds or replaces only what is named above. Nothing in site-packages is edited.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import sys
import types
import warnings
from typing import Iterator

import numpy
import torch

from .._errors import CertifyError

REQUIRED_VERSION = "0.3"
INSTALL = f"pip install --no-deps auto-lirpa=={REQUIRED_VERSION} && pip install appdirs tqdm"


class LirpaUnavailableError(CertifyError):
    """auto_LiRPA is missing, of another version, or cannot be imported with our patches."""


def _installed_version() -> str:
    try:
        return importlib.metadata.version("auto_LiRPA")
    except importlib.metadata.PackageNotFoundError:
        raise LirpaUnavailableError(
            f"the auto_LiRPA bridge needs auto-lirpa {REQUIRED_VERSION}, which is not installed: {INSTALL}"
        ) from None


def _patch_dependencies() -> None:
    """The three shims that must exist before ``import auto_LiRPA``."""
    if "numpy.lib.arraysetops" not in sys.modules:
        try:
            importlib.import_module("numpy.lib.arraysetops")  # numpy < 2 still has it
        except ImportError:
            shim = types.ModuleType("numpy.lib.arraysetops")
            shim.isin = numpy.isin  # type: ignore[attr-defined]
            sys.modules["numpy.lib.arraysetops"] = shim
    import torch.onnx.symbolic_helper as symbolic_helper

    if not hasattr(symbolic_helper, "_set_opset_version"):
        from torch.onnx._internal.torchscript_exporter._globals import GLOBALS

        def _set_opset_version(opset_version: int) -> None:
            GLOBALS.export_onnx_opset_version = opset_version

        symbolic_helper._set_opset_version = _set_opset_version
    if not hasattr(torch._C.Node, "__getitem__"):
        torch._C.Node.__getitem__ = lambda self, k: getattr(self, self.kindOf(k))(k)


def _named_members(original):
    def _named_members(self, get_members_fn, prefix="", recurse=True, remove_duplicate=True):
        return original(self, get_members_fn, prefix=prefix, recurse=recurse)

    _named_members.__wrapped__ = original
    return _named_members


def _contiguous_preprocess(original):
    def _preprocess(self, a, b, c=None):
        a, b, c = original(self, a, b, c)
        a = a.contiguous() if isinstance(a, torch.Tensor) else a
        b = b.contiguous() if isinstance(b, torch.Tensor) else b
        return a, b, c

    _preprocess.__wrapped__ = original
    return _preprocess


def _reducemax_bound_backward(original):
    """0.3's fixed-index backward with the index expanded over the specification (and batch) dimensions."""

    def bound_backward(self, last_lA, last_uA, x):
        if not self.fixed_max_index:
            return original(self, last_lA, last_uA, x)

        def one_side(last_A):
            if last_A is None:
                return None
            indices = self.indices.unsqueeze(0)
            if not self.keepdim:
                last_A = last_A.unsqueeze(self.axis + 1)
                indices = indices.unsqueeze(self.axis + 1)
            shape = list(last_A.shape)
            shape[self.axis + 1] *= self.input_shape[self.axis]
            A = torch.zeros(shape, dtype=last_A.dtype, device=last_A.device)
            A.scatter_(dim=self.axis + 1, index=indices.expand(*last_A.shape), src=last_A)
            return A

        return [(one_side(last_lA), one_side(last_uA))], 0, 0

    bound_backward.__wrapped__ = original
    return bound_backward


def _quiet_import(name: str) -> types.ModuleType:
    """Import with torch's DeprecationWarning for torch.jit.script silenced.

    auto_LiRPA 0.3 calls ``torch.jit.script`` at import and also runs ``warnings.simplefilter("once")`` at module
    level, which would override our filter and change the caller's warning filters for good. Both are confined to
    this import: `warnings.catch_warnings` restores the filters, and simplefilter is a no-op meanwhile.
    """
    simplefilter = warnings.simplefilter
    with warnings.catch_warnings():
        simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter = lambda *args, **kwargs: None
        try:
            return importlib.import_module(name)
        finally:
            warnings.simplefilter = simplefilter


def _load():
    version = _installed_version()
    if version != REQUIRED_VERSION:
        raise LirpaUnavailableError(
            f"the auto_LiRPA bridge is written and tested for auto-lirpa {REQUIRED_VERSION} (its patches, MATH.md "
            f"section 8, target that release), but {version} is installed: {INSTALL}"
        )
    with warnings.catch_warnings():  # torch.onnx's import calls torch.jit.script, deprecated in torch 2.x
        warnings.simplefilter("ignore", DeprecationWarning)
        _patch_dependencies()
    try:
        auto_LiRPA = _quiet_import("auto_LiRPA")
        bound_general = importlib.import_module("auto_LiRPA.bound_general")
        linear = importlib.import_module("auto_LiRPA.operators.linear")
        reduce = importlib.import_module("auto_LiRPA.operators.reduce")
    except ImportError as error:
        raise LirpaUnavailableError(
            f"auto_LiRPA {version} is installed but does not import ({error}); its light dependencies may be "
            f"missing: {INSTALL}"
        ) from None
    if getattr(auto_LiRPA, "__version__", None) != REQUIRED_VERSION:
        raise LirpaUnavailableError(
            f"auto_LiRPA reports version {getattr(auto_LiRPA, '__version__', None)!r}, expected {REQUIRED_VERSION}"
        )
    BoundedModule = bound_general.BoundedModule
    if not hasattr(BoundedModule._named_members, "__wrapped__"):
        BoundedModule._named_members = _named_members(BoundedModule._named_members)
    if not hasattr(linear.BoundLinear._preprocess, "__wrapped__"):
        linear.BoundLinear._preprocess = _contiguous_preprocess(linear.BoundLinear._preprocess)
    if not hasattr(reduce.BoundReduceMax.bound_backward, "__wrapped__"):
        reduce.BoundReduceMax.bound_backward = _reducemax_bound_backward(reduce.BoundReduceMax.bound_backward)
    return auto_LiRPA, reduce.BoundReduceMax


auto_LiRPA, _BoundReduceMax = _load()
BoundedModule = auto_LiRPA.BoundedModule
BoundedTensor = auto_LiRPA.BoundedTensor
PerturbationLpNorm = auto_LiRPA.PerturbationLpNorm
BoundActivation = importlib.import_module("auto_LiRPA.operators.activation").BoundActivation  # base of custom ops
VERSION = auto_LiRPA.__version__


def reducemax_fix_enabled() -> bool:
    """Whether `BoundReduceMax.bound_backward` currently carries our soundness fix."""
    return hasattr(_BoundReduceMax.bound_backward, "__wrapped__")


@contextlib.contextmanager
def reducemax_fix(enabled: bool) -> Iterator[None]:
    """Temporarily switch the ReduceMax soundness fix off (``enabled=False``) or on; restored on exit.

    Only for demonstrating the upstream bug in tests: with the fix off, CROWN bounds on softmax attention are
    unsound. Not thread-safe (it swaps a class attribute).
    """
    patched = _BoundReduceMax.bound_backward
    original = getattr(patched, "__wrapped__", patched)
    fixed = patched if hasattr(patched, "__wrapped__") else _reducemax_bound_backward(original)
    _BoundReduceMax.bound_backward = fixed if enabled else original
    try:
        yield
    finally:
        _BoundReduceMax.bound_backward = patched
