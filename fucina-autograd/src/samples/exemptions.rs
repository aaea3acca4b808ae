//! The built-in suite's layouts that are not made, each with its written
//! reason (checked by `tests/samples_ops.rs`: a skip not listed here fails,
//! and so does a listed one that is made after all).

use super::Layout;

/// Layouts the built-in suite's rows do not get, each with its reason; the
/// suite's sample test fails on a skip not listed here, and on a listed one
/// that is made after all.
pub const SAMPLE_EXEMPTIONS: &[(&str, Layout, &str)] = &[
    // ---- rank 0: the row names an axis, or the op needs a rank
    ("exp_noncontig", Layout::Rank0, T_2D),
    ("reshape", Layout::Rank0, T_2D),
    ("contiguous", Layout::Rank0, T_2D),
    ("t", Layout::Rank0, T_2D),
    ("matmul_transposed", Layout::Rank0, T_2D),
    ("sum", Layout::Rank0, AXIS),
    ("mean", Layout::Rank0, AXIS),
    ("sum_to_shape", Layout::Rank0, TARGET_SHAPE),
    ("max", Layout::Rank0, AXIS),
    ("min", Layout::Rank0, AXIS),
    ("var", Layout::Rank0, AXIS),
    ("logsumexp", Layout::Rank0, AXIS),
    ("norm", Layout::Rank0, AXIS),
    ("cumsum", Layout::Rank0, AXIS),
    ("transpose", Layout::Rank0, AXIS),
    ("permute", Layout::Rank0, AXIS),
    ("squeeze", Layout::Rank0, AXIS),
    ("unsqueeze", Layout::Rank0, AXIS),
    ("narrow", Layout::Rank0, AXIS),
    ("select", Layout::Rank0, AXIS),
    ("concat", Layout::Rank0, AXIS),
    ("split", Layout::Rank0, AXIS),
    ("chunk", Layout::Rank0, AXIS),
    ("index_select", Layout::Rank0, AXIS),
    ("gather", Layout::Rank0, AXIS),
    ("take_along_axis", Layout::Rank0, AXIS),
    ("scatter_add", Layout::Rank0, AXIS),
    ("softmax", Layout::Rank0, AXIS),
    ("softmax_axis0", Layout::Rank0, AXIS),
    ("log_softmax", Layout::Rank0, AXIS),
    ("softmax_causal", Layout::Rank0, AXIS),
    ("log_softmax_causal", Layout::Rank0, AXIS),
    ("nll_loss", Layout::Rank0, AXIS),
    (
        "pad",
        Layout::Rank0,
        "the row pads two axes; a rank-0 tensor has none (torch's pad refuses it too)",
    ),
    ("matmul", Layout::Rank0, MATMUL),
    ("matmul_batched", Layout::Rank0, MATMUL),
    ("linear", Layout::Rank0, MATMUL),
    ("linear_nobias", Layout::Rank0, MATMUL),
    (
        "view",
        Layout::Rank0,
        "the row views its 12 elements as [4, 3]; a rank-0 tensor has one",
    ),
    ("embedding", Layout::Rank0, RANKED),
    ("layer_norm", Layout::Rank0, RANKED),
    ("layer_norm_plain", Layout::Rank0, RANKED),
    ("rms_norm", Layout::Rank0, RANKED),
    ("cross_entropy", Layout::Rank0, RANKED),
    ("cross_entropy_smooth_sum", Layout::Rank0, RANKED),
    ("cross_entropy_ignore_none", Layout::Rank0, RANKED),
    ("scaled_dot_product_attention", Layout::Rank0, RANKED),
    ("sdpa_causal", Layout::Rank0, RANKED),
    ("sdpa_padding_mask", Layout::Rank0, RANKED),
    ("sdpa_gqa", Layout::Rank0, RANKED),
    ("sdpa_mqa", Layout::Rank0, RANKED),
    ("sdpa_gqa_decode", Layout::Rank0, RANKED),
    ("rope", Layout::Rank0, RANKED),
    // ---- zero-size
    (
        "max_all",
        Layout::ZeroSize,
        "the max of an empty tensor has no value (an error, as in torch)",
    ),
    (
        "min_all",
        Layout::ZeroSize,
        "the min of an empty tensor has no value (an error, as in torch)",
    ),
    (
        "view",
        Layout::ZeroSize,
        "the row views its input as [4, 3]: an empty input has no 12 elements",
    ),
    (
        "broadcast_to",
        Layout::ZeroSize,
        "the row broadcasts to the fixed [2, 3, 4]: an empty axis cannot broadcast to a \
         non-empty one",
    ),
    // ---- transposed
    (
        "broadcast_to",
        Layout::Transposed,
        "the row's only input is [3, 1]: with one axis of length 1 every transpose is \
         contiguous (its broadcast layout is the stride-0 case)",
    ),
];

/// Rank-0 reason: the row transposes with `t()`.
const T_2D: &str = "the row calls t(), which needs a 2-D input (as torch's t() beyond 1-D)";
/// Rank-0 reason: the row names an axis.
const AXIS: &str = "the row names an axis (a reduction, view, index or softmax axis); \
     a rank-0 tensor has none";
/// Rank-0 reason: contractions.
const MATMUL: &str = "a contraction needs operands of rank >= 1 (torch's matmul refuses \
     rank 0 too)";
/// Rank-0 reason: the op's contract fixes a rank.
const RANKED: &str = "the op's contract fixes its inputs' rank (a [V, D] table, a normalized \
     last axis, [N, C] logits, [B, H, T, D] attention or RoPE inputs)";

/// The row sums down to a fixed rank-2 target shape, which a rank-0 input
/// cannot broadcast to.
const TARGET_SHAPE: &str =
    "the row sums to the fixed shape [3, 1], which a rank-0 input does not broadcast to";
