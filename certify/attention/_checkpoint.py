"""Saving and loading attention layers.

`save_layer` writes ``{"format": "certify.layer", "version": 1, "class": ..., "config": ..., "state_dict": ...}``
with `torch.save`. `load_layer` reads that format, or a plain `torch.nn.MultiheadAttention` state dict (which
does not record the number of heads: pass ``num_heads``). Loading uses ``weights_only=True``: no pickled code
runs. Anything else raises `CheckpointError` with what was found.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from .._errors import CheckpointError, CertifyError
from ._contractive import ContractiveL2MultiheadAttention
from ._dot_product import DotProductMultiheadAttention
from ._l2 import L2MultiheadAttention, UntiedL2MultiheadAttention
from ._torch_import import multihead_state_dict_to_module

FORMAT = "certify.layer"
LAYER_CLASSES: dict[str, type[nn.Module]] = {
    cls.__name__: cls
    for cls in (DotProductMultiheadAttention, L2MultiheadAttention, UntiedL2MultiheadAttention,
                ContractiveL2MultiheadAttention)
}


def _config(module: nn.Module) -> dict:
    config = {"D": module.D, "H": module.H, "dtype": str(module.W_Q.dtype).replace("torch.", "")}
    if isinstance(module, ContractiveL2MultiheadAttention):
        config.update(max_tokens=module.max_tokens, gamma=module.gamma, norm=module.norm)
    elif isinstance(module, DotProductMultiheadAttention):
        config["bias"] = module.b_Q is not None
    else:
        config["bias"] = module.b_O is not None
    return config


def save_layer(module: nn.Module, path: str | os.PathLike) -> None:
    """Save one of certify's attention modules in the ``certify.layer`` format."""
    name = type(module).__name__
    if name not in LAYER_CLASSES:
        raise CheckpointError(f"can only save {sorted(LAYER_CLASSES)}, got {name}")
    state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    torch.save({"format": FORMAT, "version": 1, "class": name, "config": _config(module), "state_dict": state}, path)


def load_layer(path: str | os.PathLike, num_heads: int | None = None) -> nn.Module:
    """Load a layer saved by `save_layer`, or a `torch.nn.MultiheadAttention` state dict (needs ``num_heads``)."""
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch.load raises many types on foreign bytes (IndexError, UnpicklingError, ...)
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"cannot read checkpoint {str(path)!r} as a torch file with weights only: {first_line}. "
            "Save a state dict (torch.save(layer.state_dict(), path)) or use certify's save_layer."
        ) from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"checkpoint {str(path)!r} holds a {type(payload).__name__}, not a dict of weights")
    if payload.get("format") == FORMAT:
        return _load_certify_layer(payload, path)
    if "out_proj.weight" in payload:
        if num_heads is None:
            raise CheckpointError(
                "this is a torch.nn.MultiheadAttention state dict, which does not record num_heads: pass the "
                "number of heads (--heads H on the command line)"
            )
        return multihead_state_dict_to_module(payload, num_heads)
    keys = ", ".join(sorted(map(str, payload))[:8])
    raise CheckpointError(
        f"checkpoint {str(path)!r} is neither a certify layer nor a torch.nn.MultiheadAttention state dict "
        f"(keys: {keys})"
    )


def _load_certify_layer(payload: dict, path: str | os.PathLike) -> nn.Module:
    name, config = payload.get("class"), dict(payload.get("config", {}))
    if name not in LAYER_CLASSES:
        raise CheckpointError(f"checkpoint {str(path)!r} names unknown layer class {name!r}")
    dtype = getattr(torch, config.pop("dtype", "float32"))
    try:
        module = LAYER_CLASSES[name](dtype=dtype, **config)
        module.load_state_dict(payload["state_dict"])
    except (TypeError, KeyError, RuntimeError, CertifyError) as error:
        raise CheckpointError(f"checkpoint {str(path)!r} does not match {name}: {error}") from None
    return module
