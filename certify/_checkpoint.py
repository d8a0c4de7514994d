"""Saving and loading attention layers (certify's modules, including the contractive one of `certify.invertible`).

`save_layer` writes ``{"format": "certify.layer", "version": 1, "class": ..., "config": ..., "state_dict": ...}``
with `torch.save`. `load_layer` reads that format, or a plain `torch.nn.MultiheadAttention` state dict. Such a
state dict records neither the number of heads nor ``add_zero_attn`` (an extra all-zero key/value token that
changes the map; ``add_bias_kv`` does leave keys, and is refused): the caller states both, ``num_heads=H`` and
``add_zero_attn=False``. Loading uses ``weights_only=True``: no pickled code runs. The config and every tensor
are validated before a module is built (shapes, dtype float32 / float64, one dtype throughout); anything else
raises `CheckpointError` with what was found.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from ._errors import CheckpointError
from .attention import DotProductMultiheadAttention, L2MultiheadAttention, UntiedL2MultiheadAttention
from .attention._torch_import import multihead_state_dict_to_module
from .attention._weights import DTYPE_NAMES
from .invertible import ContractiveL2MultiheadAttention

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


def load_layer(path: str | os.PathLike, num_heads: int | None = None,
               add_zero_attn: bool | None = None) -> nn.Module:
    """Load a layer saved by `save_layer`, or a `torch.nn.MultiheadAttention` state dict.

    A `torch.nn.MultiheadAttention` state dict needs ``num_heads`` and ``add_zero_attn=False`` (it records neither;
    ``add_zero_attn=True`` is refused, as `from_torch_multihead_attention` refuses such a module). For certify's
    format both may be omitted; given, they must agree with the checkpoint.
    """
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
        module = _load_certify_layer(payload, path)
        if num_heads is not None and num_heads != module.H:
            raise CheckpointError(f"checkpoint {str(path)!r} holds a layer with H = {module.H} heads, not the "
                                  f"{num_heads} asked for")
        if add_zero_attn:
            raise CheckpointError(f"checkpoint {str(path)!r} holds a {type(module).__name__}, which has no "
                                  "add_zero_attn option (that is a torch.nn.MultiheadAttention option)")
        return module
    if "out_proj.weight" in payload:
        missing = [(flag, name) for flag, name, value in (("--heads H", "num_heads=H", num_heads),
                                                          ("--add-zero-attn no", "add_zero_attn=False", add_zero_attn))
                   if value is None]
        if missing:
            raise CheckpointError(
                "this is a torch.nn.MultiheadAttention state dict, which records neither num_heads nor "
                "add_zero_attn (an extra all-zero key/value token that changes the map); state them: "
                f"{' '.join(f for f, _ in missing)} on the command line ({', '.join(n for _, n in missing)} in "
                "load_layer), or certify the module itself with certify_layer(mha, ...)"
            )
        if add_zero_attn:
            raise CheckpointError("add_zero_attn=True is not supported: the extra zero token changes the map")
        return multihead_state_dict_to_module(payload, num_heads)
    keys = ", ".join(sorted(map(str, payload))[:8])
    raise CheckpointError(
        f"checkpoint {str(path)!r} is neither a certify layer nor a torch.nn.MultiheadAttention state dict "
        f"(keys: {keys})"
    )


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_config(name: str, config: object, where: str) -> dict:
    """The constructor arguments of a ``certify.layer`` checkpoint, validated (refused with the reason)."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{where} has no config dict (got {type(config).__name__})")
    contractive = name == ContractiveL2MultiheadAttention.__name__
    allowed = {"D", "H", "dtype"} | ({"max_tokens", "gamma", "norm"} if contractive else {"bias"})
    required = {"D", "H"} | ({"max_tokens"} if contractive else set())
    if set(config) - allowed or required - set(config):
        raise CheckpointError(f"{where}: config for {name} must have keys {sorted(required)} (and optionally "
                              f"{sorted(allowed - required)}), got {sorted(map(str, config))}")
    D, H = config["D"], config["H"]
    if not (_positive_int(D) and _positive_int(H) and D % H == 0):
        raise CheckpointError(f"{where}: config needs integers D >= 1 and H >= 1 with H dividing D, got D = {D!r}, "
                              f"H = {H!r}")
    if config.get("dtype", "float32") not in DTYPE_NAMES:
        raise CheckpointError(f"{where}: config dtype must be one of {list(DTYPE_NAMES)}, got {config['dtype']!r}")
    if not isinstance(config.get("bias", False), bool):
        raise CheckpointError(f"{where}: config bias must be true or false, got {config['bias']!r}")
    if contractive:
        gamma, norm = config.get("gamma", 0.9), config.get("norm", "inf")
        if not _positive_int(config["max_tokens"]):
            raise CheckpointError(f"{where}: config max_tokens must be an integer >= 1, got {config['max_tokens']!r}")
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 < gamma < 1:
            raise CheckpointError(f"{where}: config gamma must lie in (0, 1) for a contraction, got {gamma!r}")
        if norm not in ("2", "inf"):
            raise CheckpointError(f"{where}: config norm must be '2' or 'inf', got {norm!r}")
    return dict(config)


def _load_certify_layer(payload: dict, path: str | os.PathLike) -> nn.Module:
    where = f"checkpoint {str(path)!r}"
    name = payload.get("class")
    if name not in LAYER_CLASSES:
        raise CheckpointError(f"{where} names unknown layer class {name!r}")
    if payload.get("version") != 1:
        raise CheckpointError(f"{where} has format version {payload.get('version')!r}; this certify reads version 1")
    config = _check_config(name, payload.get("config"), where)
    dtype = getattr(torch, config.pop("dtype", "float32"))
    state = payload.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(f"{where} has no state_dict dict (got {type(state).__name__})")
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{where}: state_dict entry {key!r} is a {type(value).__name__}, not a tensor")
        if value.dtype != dtype:
            raise CheckpointError(f"{where}: state_dict entry {key!r} has dtype "
                                  f"{str(value.dtype).replace('torch.', '')} but the config says "
                                  f"{str(dtype).replace('torch.', '')}")
    try:
        module = LAYER_CLASSES[name](dtype=dtype, **config)
        module.load_state_dict(state)
    except (TypeError, KeyError, RuntimeError, ValueError) as error:
        raise CheckpointError(f"{where} does not match {name}: {error}") from None
    return module
