"""Whole models as data (`Model`, a tuple of blocks), importers from torch and ONNX, and certified local Lipschitz
constants of the whole model on an eps-ball (`certify_model`); VNNLIB properties read and decided (`read_vnnlib`,
`decide`)."""

from ._blocks import (
    Activation as Activation,
    AddConstant as AddConstant,
    Attention as Attention,
    ChannelAffine as ChannelAffine,
    ClassToken as ClassToken,
    FeedForward as FeedForward,
    L2Attention as L2Attention,
    Gather as Gather,
    LayerNorm as LayerNorm,
    Linear as Linear,
    Model as Model,
    Pool as Pool,
    Residual as Residual,
    post_ln_block as post_ln_block,
    pre_ln_block as pre_ln_block,
)
from ._forward import forward as forward
from ._torch_import import from_torch as from_torch, language_model_input as language_model_input
from ._onnx_import import SUPPORTED_OPS as SUPPORTED_OPS, from_onnx as from_onnx
from ._certify import (
    AttainedEstimate as AttainedEstimate,
    BlockFactor as BlockFactor,
    ModelCertificate as ModelCertificate,
    attained_lipschitz as attained_lipschitz,
    certify_model as certify_model,
    chain_memory as chain_memory,
    model_enclosure as model_enclosure,
)
from ._jacobian_chain import ChainEnclosure as ChainEnclosure
from ._jacobian_chain import ModelInterrupted as ModelInterrupted
from ._jacobian_chain import PrefixBound as PrefixBound
from ._radius import ModelRadius as ModelRadius, certified_radius as certified_radius, vnnlib_bounds as vnnlib_bounds
from ._vnnlib import (
    Case as Case,
    CaseResult as CaseResult,
    DisjunctResult as DisjunctResult,
    VnnlibProperty as VnnlibProperty,
    VnnlibResult as VnnlibResult,
    Witness as Witness,
    check_witness as check_witness,
    decide as decide,
    model_output as model_output,
    pgd_counterexample as pgd_counterexample,
    read_vnnlib as read_vnnlib,
    write_vnnlib as write_vnnlib,
)
