"""The CUDA autocast policy as data: which op runs in lower precision, which in fp32, which promotes.

Read from torch 2.13.0's installed ``torch/include/ATen/autocast_mode.h`` (``AT_FORALL_LOWER_PRECISION_FP``,
``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``, ``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE``,
``AT_FORALL_PROMOTE``) and ``aten/src/ATen/autocast_mode.cpp``; tests/profiler/test_cuda_semantics.py checks the
table against the installed torch's ``AutocastCUDA`` registrations and header. The machinery that applies it is
:mod:`autoshard.profiler.cuda_semantics`.
"""

from __future__ import annotations

import enum

__all__ = ["APPEND_DTYPE_TARGETS", "CUDA_AUTOCAST_POLICIES", "TORCH_2_13_POLICIES", "CastPolicy"]


class CastPolicy(enum.Enum):
    """How CUDA autocast treats an op (``at::autocast::CastPolicy``, ATen/autocast_mode.h)."""

    LOWER_PRECISION = "lower_precision_fp"
    """Cast every floating-point tensor argument to the autocast dtype."""
    FP32 = "fp32"
    """Cast every floating-point tensor argument to float32."""
    FP32_SET_OPT_DTYPE = "fp32_set_opt_dtype"
    """Leave inputs alone but set an unset ``dtype`` argument to float32 (softmax, sum, ...)."""
    FP32_APPEND_DTYPE = "fp32_append_dtype"
    """Redispatch to the overload that takes a dtype, with float32 (``norm``)."""
    PROMOTE = "promote"
    """Cast every floating-point tensor argument to the widest floating dtype among them."""
    BANNED = "banned"
    """Raise: the op is unsafe under autocast (``binary_cross_entropy``)."""


def _policies(policy: CastPolicy, names: str) -> dict[str, CastPolicy]:
    return {name: policy for name in names.split()}


TORCH_2_13_POLICIES: dict[str, CastPolicy] = {
    # AT_FORALL_LOWER_PRECISION_FP, plus cudnn_convolution(_transpose) registered next to it in
    # autocast_mode.cpp (torch 2.13). Overload names as the dispatcher spells them.
    **_policies(
        CastPolicy.LOWER_PRECISION,
        """aten::_convolution.deprecated aten::_convolution aten::conv1d aten::conv2d aten::conv3d
        aten::conv_tbc aten::conv_transpose1d aten::conv_transpose2d.input
        aten::conv_transpose3d.input aten::convolution aten::prelu aten::addmm aten::addmv
        aten::addr aten::matmul aten::einsum aten::mm aten::mv aten::linalg_vecdot aten::linear
        aten::addbmm aten::baddbmm aten::bmm aten::chain_matmul aten::linalg_multi_dot
        aten::_thnn_fused_lstm_cell aten::_thnn_fused_gru_cell aten::lstm_cell aten::gru_cell
        aten::rnn_tanh_cell aten::rnn_relu_cell aten::_scaled_dot_product_flash_attention
        aten::scaled_dot_product_attention aten::cudnn_convolution
        aten::cudnn_convolution_transpose""",
    ),
    # AT_FORALL_FP32
    **_policies(
        CastPolicy.FP32,
        """aten::acos aten::asin aten::cosh aten::erfinv aten::exp aten::expm1 aten::log
        aten::log10 aten::log2 aten::log1p aten::reciprocal aten::rsqrt aten::sinh aten::tan
        aten::pow.Tensor_Scalar aten::pow.Tensor_Tensor aten::pow.Scalar aten::softplus
        aten::layer_norm aten::native_layer_norm aten::rms_norm aten::group_norm
        aten::frobenius_norm.dim aten::nuclear_norm aten::nuclear_norm.dim
        aten::cosine_similarity aten::poisson_nll_loss aten::cosine_embedding_loss
        aten::nll_loss aten::nll_loss2d aten::hinge_embedding_loss aten::kl_div aten::l1_loss
        aten::smooth_l1_loss aten::huber_loss aten::mse_loss aten::margin_ranking_loss
        aten::multilabel_margin_loss aten::soft_margin_loss aten::triplet_margin_loss
        aten::multi_margin_loss aten::binary_cross_entropy_with_logits aten::dist aten::pdist
        aten::cdist aten::renorm aten::logsumexp aten::upsample_nearest1d
        aten::_upsample_nearest_exact1d aten::upsample_nearest2d aten::_upsample_nearest_exact2d
        aten::upsample_nearest3d aten::_upsample_nearest_exact3d aten::upsample_linear1d
        aten::upsample_bilinear2d aten::_upsample_bilinear2d_aa aten::upsample_trilinear3d
        aten::upsample_bicubic2d aten::_upsample_bicubic2d_aa""",
    ),
    # AT_FORALL_FP32_SET_OPT_DTYPE
    **_policies(
        CastPolicy.FP32_SET_OPT_DTYPE,
        """aten::prod aten::prod.dim_int aten::softmax.int aten::log_softmax.int aten::cumprod
        aten::cumsum aten::linalg_vector_norm aten::linalg_matrix_norm
        aten::linalg_matrix_norm.str_ord aten::sum aten::sum.dim_IntList""",
    ),
    # AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE
    **_policies(CastPolicy.FP32_APPEND_DTYPE, "aten::norm.Scalar aten::norm.ScalarOpt_dim"),
    # AT_FORALL_PROMOTE (cat and stack left this list when they learned type promotion)
    **_policies(
        CastPolicy.PROMOTE,
        """aten::addcdiv aten::addcmul aten::atan2 aten::bilinear aten::cross aten::dot
        aten::vdot aten::grid_sampler aten::index_put aten::tensordot aten::scatter_add""",
    ),
    # autocast_mode.cpp: binary_cross_entropy_banned
    "aten::binary_cross_entropy": CastPolicy.BANNED,
}
"""The CUDA autocast policy of every op with an ``AutocastCUDA`` kernel in torch 2.13."""


def _installed(table: dict[str, CastPolicy]) -> dict[str, CastPolicy]:
    """The entries of ``table`` the installed torch's CUDA autocast has a kernel for: another release autocasts
    fewer ops (torch 2.11 has no ``aten::rms_norm`` entry, so ``F.rms_norm`` keeps its input's dtype there). An op
    only an older release autocasts (its ``Dimname`` overloads, ``_cudnn_rnn``) has no known policy here and runs
    as it is."""
    import torch

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return {name: policy for name, policy in table.items() if has(name, "AutocastCUDA")}


CUDA_AUTOCAST_POLICIES: dict[str, CastPolicy] = _installed(TORCH_2_13_POLICIES)
"""The policies the emulation applies: :data:`TORCH_2_13_POLICIES` less the ops the installed torch does not
autocast on CUDA (all of them under torch 2.13)."""

# FP32_APPEND_DTYPE redispatch targets (AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE).
APPEND_DTYPE_TARGETS = {
    "aten::norm.Scalar": "aten::norm.ScalarOpt_dtype",
    "aten::norm.ScalarOpt_dim": "aten::norm.ScalarOpt_dim_dtype",
}
