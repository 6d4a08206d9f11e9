/* weft/op_table.h: every op of the op layer, defined once.
 *
 * One row per op, in sections by family; the rest is generated from the rows by the
 * X-macros below: the op ids and their names (weft/kernel.h), the public declarations of
 * the elementwise families (weft/ops.h), the elementwise front ends, the autograd nodes'
 * names and backward formulas and what they save (ops/unary.c, ops/binary.c, ...),
 * autocast's policies (ops/autocast.c), and the conformance suite's and gradcheck's cases
 * (testkit/conformance.c, tests/test_op_table.c). docs/adding-an-op.md walks through a row.
 *
 * X(ID, name, DTYPES, AUTOCAST, GRAD_FN, SAVES, BACKWARD, DOMAIN, REF)
 *   ID        the op's id is WEFT_OP_<ID> (rows of WEFT_OPS_COMPOSITE have none: they run
 *             other ops' kernels)
 *   name      PyTorch's name: the function weft_<name> and the id's name
 *   DTYPES    the dtype rule of the family (below); NONE where the front end decides
 *   AUTOCAST  PROMOTE (runs in what it is given), LOWER, FP32 (weft/autocast_policy.h)
 *   GRAD_FN   the autograd node's name, PyTorch's ("ExpBackward0"); NULL: not
 *             differentiable
 *   SAVES     what the node keeps for its formula: NOTHING, INPUT, RESULT, INPUT_RESULT
 *             (binary: A, B, OUT, or-ed), or FN (the front end saves what its formula
 *             reads)
 *   BACKWARD  the formula: for UNARY an expression of g (the gradient), x (the input) and
 *             y (the result) written with weft ops, as derivatives.yaml writes it; for the
 *             others the function that holds it (ops/<family>.c)
 *   DOMAIN    where the op is differentiable and its test inputs come from: ANY (within
 *             [-2, 2]), POSITIVE (within [0.25, 2]), NONE (no elementwise test)
 *   REF       the op on doubles (x, or a and b), the conformance suite's reference; 0
 *             where a family's driver has its own
 *
 * Adding an elementwise op is a row here plus its kernel's expression in each backend
 * (plugins/cpu/kernels_unary.c, plugins/cuda/kernels_elementwise.cu). Ids are ABI
 * (weft/registry.h's WEFT_ABI_VERSION): a row appended to a section that ends before
 * another section's rows changes the ids after it, so new rows are ABI changes. */
#ifndef WEFT_OP_TABLE_H
#define WEFT_OP_TABLE_H

/* ---- sequences (ops/ranges.c) --------------------------------------------------------
 * ARANGE: 1-D out[0][i] = scalar[0] + i * scalar[1], computed in double then cast.
 * LINSPACE: 1-D out, n = ints[0]; step = (scalar[1]-scalar[0])/(n-1); i < n/2:
 *   start + i*step, else end - (n-1-i)*step (torch's symmetric formula). */
#define WEFT_OPS_SEQUENCE(X)                                                                  \
    X(ARANGE, arange, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)                            \
    X(LINSPACE, linspace, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)

/* ---- unary elementwise: weft_<name>(t), weft_<name>_(t) (ops/unary.c) -----------------
 * Kernel: out[0] = f(in[0]), same shape, same dtype (the front end converts integer inputs
 * of floating-only functions); LOGICAL_NOT gives bool.
 * DTYPES: SAME keeps the dtype (the kernels say which exist); FLOAT computes bool and
 * integer inputs in the default float dtype; FLOATING refuses them (PyTorch implements
 * gelu and silu for floating dtypes only); NEG and RELU refuse bool; ROUNDING is the
 * identity on integers; NOT gives bool. */
#define WEFT_OPS_UNARY(X)                                                                     \
    X(NEG, neg, NEG, PROMOTE, "NegBackward0", NOTHING, (weft_neg(g)), ANY, (-x))              \
    X(ABS, abs, SAME, PROMOTE, "AbsBackward0", INPUT, (weft_mul(g, weft_sign(x))), ANY,       \
      (fabs(x)))                                                                              \
    X(SIGN, sign, SAME, PROMOTE, "SignBackward0", NOTHING, (weft_zeros_like(g)), ANY,         \
      ((x > 0) - (x < 0)))                                                                    \
    X(EXP, exp, FLOAT, FP32, "ExpBackward0", RESULT, (weft_mul(g, y)), ANY, (exp(x)))         \
    X(EXPM1, expm1, FLOAT, FP32, "Expm1Backward0", RESULT,                                    \
      (weft_mul(g, weft_add_scalar(y, 1))), ANY, (expm1(x)))                                  \
    X(LOG, log, FLOAT, FP32, "LogBackward0", INPUT, (weft_div(g, x)), POSITIVE, (log(x)))     \
    X(LOG1P, log1p, FLOAT, FP32, "Log1PBackward0", INPUT,                                     \
      (weft_div(g, weft_add_scalar(x, 1))), POSITIVE, (log1p(x)))                             \
    X(SQRT, sqrt, FLOAT, PROMOTE, "SqrtBackward0", RESULT,                                    \
      (weft_div(g, weft_mul_scalar(y, 2))), POSITIVE, (sqrt(x)))                              \
    X(RSQRT, rsqrt, FLOAT, FP32, "RsqrtBackward0", RESULT,                                    \
      (weft_mul(g, weft_mul_scalar(weft_pow_scalar(y, 3), -0.5))), POSITIVE, (1 / sqrt(x)))   \
    X(RECIPROCAL, reciprocal, FLOAT, FP32, "ReciprocalBackward0", RESULT,                     \
      (weft_mul(g, weft_neg(weft_mul(y, y)))), POSITIVE, (1 / x))                             \
    X(SIN, sin, FLOAT, PROMOTE, "SinBackward0", INPUT, (weft_mul(g, weft_cos(x))), ANY,       \
      (sin(x)))                                                                               \
    X(COS, cos, FLOAT, PROMOTE, "CosBackward0", INPUT, (weft_mul(g, weft_neg(weft_sin(x)))),  \
      ANY, (cos(x)))                                                                          \
    X(TANH, tanh, FLOAT, PROMOTE, "TanhBackward0", RESULT, (tanh_backward(g, y)), ANY,        \
      (tanh(x)))                                                                              \
    X(SIGMOID, sigmoid, FLOAT, PROMOTE, "SigmoidBackward0", RESULT, (sigmoid_backward(g, y)), \
      ANY, (1 / (1 + exp(-x))))                                                               \
    X(RELU, relu, RELU, PROMOTE, "ReluBackward0", RESULT, (weft_threshold_backward(g, y, 0)), \
      ANY, (x > 0 ? x : 0))                                                                   \
    X(GELU, gelu, FLOATING, PROMOTE, "GeluBackward0", INPUT, (weft_gelu_backward(g, x, 0)),   \
      ANY, (0.5 * x * (1 + erf(x * M_SQRT1_2))))                                              \
    X(SILU, silu, FLOATING, PROMOTE, "SiluBackward0", INPUT, (silu_backward(g, x)), ANY,      \
      (x / (1 + exp(-x))))                                                                    \
    X(ERF, erf, FLOAT, PROMOTE, "ErfBackward0", INPUT,                                        \
      (weft_mul(g, weft_mul_scalar(weft_exp(weft_neg(weft_mul(x, x))), M_2_SQRTPI))), ANY,    \
      (erf(x)))                                                                               \
    X(FLOOR, floor, ROUNDING, PROMOTE, "FloorBackward0", NOTHING, (weft_zeros_like(g)), ANY,  \
      (floor(x)))                                                                             \
    X(CEIL, ceil, ROUNDING, PROMOTE, "CeilBackward0", NOTHING, (weft_zeros_like(g)), ANY,     \
      (ceil(x)))                                                                              \
    X(ROUND, round, ROUNDING, PROMOTE, "RoundBackward0", NOTHING, (weft_zeros_like(g)), ANY,  \
      (nearbyint(x)))                                                                         \
    X(TRUNC, trunc, ROUNDING, PROMOTE, "TruncBackward0", NOTHING, (weft_zeros_like(g)), ANY,  \
      (trunc(x)))                                                                             \
    X(LOGICAL_NOT, logical_not, NOT, PROMOTE, NULL, NOTHING, NULL, ANY, (x == 0))             \
    /* sin(pi x) / (pi x), 1 at 0; d/dx = (cos(pi x) - y) / x, 0 at 0 (PyTorch's sinc) */     \
    X(SINC, sinc, FLOAT, PROMOTE, "SincBackward0", INPUT_RESULT,                              \
      (weft_mul(g, weft_where_scalar(weft_ne_scalar(x, 0),                                    \
                                                                                              \
                                     weft_div(weft_sub(weft_cos(weft_mul_scalar(x, M_PI)), y),\
                                              x),                                             \
                                     0))),                                                    \
      ANY, (x == 0 ? 1 : sin(M_PI * x) / (M_PI * x)))

/* ---- binary elementwise with broadcasting: weft_<name>(a, b), weft_<name>_(a, b),
 * weft_<name>_scalar(a, s), weft_<name>_scalar_(a, s) (ops/binary.c) -----------------
 * Kernel: out[0] = f(in[0], in[1]), same shape, in[0] and in[1] of one dtype; in[1] may
 * be NULL, then the right operand is scalar[0]. Comparisons and logical ops give bool.
 * DIV is true division on floating dtypes only.
 * DTYPES: ARITH computes in the promoted dtype; SUB refuses bool; DIV computes integers in
 * the default float dtype; POW refuses an integer base with a negative integer scalar
 * exponent; COMPARE gives bool. GRAD_FN and SAVES are the tensor-tensor form's: pow's
 * scalar form is PowBackward0 (PyTorch's overload), and a tensor times or over a scalar
 * keeps nothing (its formula reads neither, as PyTorch's). */
#define WEFT_OPS_BINARY(X)                                                                    \
    X(ADD, add, ARITH, PROMOTE, "AddBackward0", NOTHING, add_backward, ANY, (a + b))          \
    X(SUB, sub, SUB, PROMOTE, "SubBackward0", NOTHING, sub_backward, ANY, (a - b))            \
    X(MUL, mul, ARITH, PROMOTE, "MulBackward0", A | B, mul_backward, ANY, (a * b))            \
    X(DIV, div, DIV, PROMOTE, "DivBackward0", B | OUT, div_backward, POSITIVE, (a / b))       \
    X(POW, pow, POW, FP32, "PowBackward1", A | B | OUT, pow_backward, POSITIVE, (pow(a, b)))  \
    X(MAXIMUM, maximum, ARITH, PROMOTE, "MaximumBackward0", A | B, maximum_backward, ANY,     \
      (a > b ? a : b))                                                                        \
    X(MINIMUM, minimum, ARITH, PROMOTE, "MinimumBackward0", A | B, minimum_backward, ANY,     \
      (a < b ? a : b))                                                                        \
    X(EQ, eq, COMPARE, PROMOTE, NULL, NOTHING, NULL, ANY, (a == b))                           \
    X(NE, ne, COMPARE, PROMOTE, NULL, NOTHING, NULL, ANY, (a != b))                           \
    X(LT, lt, COMPARE, PROMOTE, NULL, NOTHING, NULL, ANY, (a < b))                            \
    X(LE, le, COMPARE, PROMOTE, NULL, NOTHING, NULL, ANY, (a <= b))                           \
    X(GT, gt, COMPARE, PROMOTE, NULL, NOTHING, NULL, ANY, (a > b))                            \
    X(GE, ge, COMPARE, PROMOTE, NULL, NOTHING, NULL, ANY, (a >= b))                           \
    X(LOGICAL_AND, logical_and, COMPARE, PROMOTE, NULL, NOTHING, NULL, ANY,                   \
      (a != 0 && b != 0))                                                                     \
    X(LOGICAL_OR, logical_or, COMPARE, PROMOTE, NULL, NOTHING, NULL, ANY, (a != 0 || b != 0))

/* ---- selection (ops/where_clamp.c; declared in weft/ops.h) -----------------------------
 * WHERE: out[0] = in[0] (bool) ? in[1] : in[2], same shape; in[1]/in[2] share out's dtype;
 *   a NULL in[1] or in[2] means scalar[0] or scalar[1].
 * CLAMP: out[0] = min(max(in[0], scalar[0]), scalar[1]); ints[0]/ints[1] say whether the
 *   lower/upper bound is present. Same dtype. */
#define WEFT_OPS_SELECT(X)                                                                    \
    X(WHERE, where, NONE, PROMOTE, "WhereBackward0", FN, where_backward, NONE, 0)             \
    X(CLAMP, clamp, NONE, PROMOTE, "ClampBackward1", FN, clamp_backward, NONE, 0)

/* ---- reductions (ops/reduce.c; declared in weft/ops.h) ---------------------------------
 * Kernel: in[0] has its reduced dims last; ints[0] = k, the number of trailing reduced
 * dims; out[0] has in[0]'s leading ndim-k dims. SUM/PROD: out dtype int64 for
 * bool/integers else in's; MEAN/VAR: floating; VAR: scalar[0] = correction; ALL/ANY: bool
 * out. MAX/MIN: values in out[0] (in's dtype), and when nout == 2 int64 indices of the
 * first extreme in out[1] (k == 1 then). ARGMAX/ARGMIN: k == 1, int64 out[0]. NaN
 * propagates through MAX/MIN/ARGMAX/ARGMIN as in PyTorch.
 * GRAD_FN: the name of the reduction over given dims; PyTorch names the full reduction of
 * sum, mean and prod ...Backward0, and max(dim)/min(dim) MaxBackward0/MinBackward0. */
#define WEFT_OPS_REDUCE(X)                                                                    \
    X(SUM, sum, NONE, FP32, "SumBackward1", NOTHING, reduce_backward, NONE, 0)                \
    X(PROD, prod, NONE, FP32, "ProdBackward1", INPUT_RESULT, reduce_backward, NONE, 0)        \
    X(MEAN, mean, NONE, PROMOTE, "MeanBackward1", NOTHING, reduce_backward, NONE, 0)          \
    X(VAR, var, NONE, PROMOTE, "VarBackward0", INPUT, reduce_backward, NONE, 0)               \
    X(MAX, max, NONE, PROMOTE, "MaxBackward1", INPUT_RESULT, reduce_backward, NONE, 0)        \
    X(MIN, min, NONE, PROMOTE, "MinBackward1", INPUT_RESULT, reduce_backward, NONE, 0)        \
    X(ARGMAX, argmax, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)                            \
    X(ARGMIN, argmin, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)                            \
    X(ALL, all, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)                                  \
    X(ANY, any, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)

/* ---- the other ops with kernels of their own (declared in weft/ops.h, front ends in
 * the file named, nn's front ends for im2col, col2im and the pools) --------------------
 * SOFTMAX / LOG_SOFTMAX: out[0] same shape and floating dtype as in[0]; ints[0] dim.
 * MATMUL: in[0] [B, M, K], in[1] [B, K, N], out[0] [B, M, N] (any strides; batch strides
 *   may be 0), one dtype.
 * INDEX_SELECT: out[0] = in[0] indexed along ints[0] by in[1] (int64 1-D, checked in range
 *   by the kernel: IndexError "index out of range in self").
 * GATHER: out[0][..i..] = in[0][.. in[1][..i..] ..] along ints[0]; in[1] int64 has out's
 *   shape. Kernel checks range: "index 5 is out of bounds for dimension 1 with size 3".
 * SCATTER_ADD: out[0][.. in[0][..i..] ..] += in[1][..i..] along ints[0], in place on
 *   out[0]; in[0] int64 index and in[1] src have the iteration shape (index's).
 * Convolution and pooling geometry, shared by the ops below: ints[0..7] = kH, kW,
 * strideH, strideW, padH, padW, dilationH, dilationW (all >= 1 but pads >= 0). Images are
 * [N, C, H, W]; output positions (oh, ow) read rows oh*sH - pH + i*dH and columns
 * ow*sW - pW + j*dW; positions outside the image are padding.
 * IM2COL: in[0] [N, C, H, W] (any strides) -> out[0] contiguous [N, C*kH*kW, OH*OW], row
 *   (c*kH + i)*kW + j holding the input under kernel tap (i, j) of channel c, 0 in
 *   padding; ints[8], ints[9] = OH, OW.
 * COL2IM: the adjoint of IM2COL: in[0] [N, C*kH*kW, OH*OW] (any strides) -> out[0]
 *   contiguous [N, C, H, W], overwritten with the sum of every column entry that reads
 *   each pixel (padding entries are dropped); ints[8], ints[9] = OH, OW.
 * MAX_POOL2D: in[0] [N, C, H, W] (any strides) -> out[0] values and out[1] int64 indices
 *   (h*W + w within the plane), both contiguous [N, C, OH, OW]; the window holds the
 *   in-image taps only; the first maximum wins, NaN propagates (a NaN tap is taken); a
 *   window without in-image taps gives -inf and index -1.
 * MAX_POOL2D_BACKWARD: in[0] grad_output [N, C, OH, OW], in[1] int64 indices (any
 *   strides) -> out[0] contiguous [N, C, H, W] zeroed, then grad_output added at each
 *   index (indices < 0 are skipped). Dispatch dtype: in[0]'s.
 * AVG_POOL2D: in[0] [N, C, H, W] (any strides) -> out[0] contiguous [N, C, OH, OW];
 *   dilation must be 1. PyTorch's windows: hstart = oh*sH - pH, hend = min(hstart + kH,
 *   H + pH), pool size (hend-hstart)*(wend-wstart), then clipped to the image; the
 *   clipped window's sum is divided by ints[9] when > 0 (divisor_override), else by the
 *   pool size when ints[8] (count_include_pad), else by the clipped window's size; an
 *   empty clipped window gives 0.
 * AVG_POOL2D_BACKWARD: in[0] grad_output [N, C, OH, OW] (any strides) -> out[0]
 *   contiguous [N, C, H, W]: each pixel gets grad_output / divisor of every window that
 *   holds it; same ints as AVG_POOL2D. */
#define WEFT_OPS_OTHER(X)                                                                     \
    X(SOFTMAX, softmax, NONE, FP32, "SoftmaxBackward0", RESULT, softmax_backward, NONE, 0)    \
    X(LOG_SOFTMAX, log_softmax, NONE, FP32, "LogSoftmaxBackward0", RESULT, softmax_backward,  \
      NONE, 0)                                                                                \
    X(MATMUL, matmul, NONE, LOWER, "MatmulBackward0", FN, matmul_backward, NONE, 0)           \
    X(INDEX_SELECT, index_select, NONE, PROMOTE, "IndexSelectBackward0", FN, index_backward,  \
      NONE, 0)                                                                                \
    X(GATHER, gather, NONE, PROMOTE, "GatherBackward0", FN, index_backward, NONE, 0)          \
    X(SCATTER_ADD, scatter_add, NONE, PROMOTE, "ScatterAddBackward0", FN, index_backward,     \
      NONE, 0)                                                                                \
    X(IM2COL, im2col, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)                            \
    X(COL2IM, col2im, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)                            \
    X(MAX_POOL2D, max_pool2d, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)                    \
    X(MAX_POOL2D_BACKWARD, max_pool2d_backward, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)  \
    X(AVG_POOL2D, avg_pool2d, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)                    \
    X(AVG_POOL2D_BACKWARD, avg_pool2d_backward, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)

/* ---- ops without a kernel id: they run other ops' kernels (or a named kernel, weft/
 * kernel.h) and record their own node (declared in weft/ops.h, front end and formula in
 * the file named) ---------------------------------------------------------------------- */
#define WEFT_OPS_COMPOSITE(X)                                                                 \
    X(STD, std, NONE, PROMOTE, "StdBackward0", INPUT_RESULT, reduce_backward, NONE, 0)        \
    X(MM, mm, NONE, LOWER, "MmBackward0", FN, matmul_backward, NONE, 0)                       \
    X(BMM, bmm, NONE, LOWER, "BmmBackward0", FN, matmul_backward, NONE, 0)                    \
    X(ADDMM, addmm, NONE, LOWER, "AddmmBackward0", FN, addmm_backward, NONE, 0)               \
    X(BADDBMM, baddbmm, NONE, LOWER, "BaddbmmBackward0", FN, addmm_backward, NONE, 0)         \
    X(LOGSUMEXP, logsumexp, NONE, FP32, "LogsumexpBackward0", INPUT_RESULT,                   \
      logsumexp_backward, NONE, 0)                                                            \
    X(CAT, cat, NONE, PROMOTE, "CatBackward0", FN, cat_backward, NONE, 0)                     \
    X(STACK, stack, NONE, PROMOTE, "StackBackward0", FN, cat_backward, NONE, 0)               \
    X(MASKED_FILL, masked_fill, NONE, PROMOTE, "MaskedFillBackward0", FN,                     \
      masked_fill_backward, NONE, 0)                                                          \
    X(FLOOR_DIVIDE, floor_divide, NONE, PROMOTE, NULL, NOTHING, NULL, NONE, 0)                \
    X(REMAINDER, remainder, NONE, PROMOTE, "RemainderBackward0", FN, remainder_backward,      \
      NONE, 0)                                                                                \
    X(SCATTER, scatter, NONE, PROMOTE, "ScatterBackward0", FN, scatter_backward, NONE, 0)     \
    X(SCATTER_REDUCE, scatter_reduce, NONE, PROMOTE, "ScatterReduceBackward0", FN,            \
      scatter_reduce_backward, NONE, 0)                                                       \
    WEFT_OPS_PORTED(X)

/* ---- the functions ported programs call most (issue 32): composites, and front ends of
 * the named CUMSUM, CUMPROD and SORT kernels (weft/kernel.h); declared in weft/ops.h ---- */
#define WEFT_OPS_PORTED(X)                                                                    \
    X(CUMSUM, cumsum, NONE, FP32, "CumsumBackward0", NOTHING, scan_backward, NONE, 0)         \
    X(CUMPROD, cumprod, NONE, FP32, "CumprodBackward0", FN, scan_backward, NONE, 0)           \
    X(SORT, sort, NONE, PROMOTE, "SortBackward0", FN, sort_backward, NONE, 0)                 \
    X(TOPK, topk, NONE, PROMOTE, "TopkBackward0", FN, sort_backward, NONE, 0)                 \
    X(AMAX, amax, NONE, PROMOTE, "AmaxBackward0", INPUT_RESULT, reduce_backward, NONE, 0)     \
    X(AMIN, amin, NONE, PROMOTE, "AminBackward0", INPUT_RESULT, reduce_backward, NONE, 0)     \
    X(FLIP, flip, NONE, PROMOTE, "FlipBackward0", NOTHING, rearrange_backward, NONE, 0)       \
    X(ROLL, roll, NONE, PROMOTE, "RollBackward0", NOTHING, rearrange_backward, NONE, 0)       \
    X(TRIL, tril, NONE, PROMOTE, "TrilBackward0", NOTHING, rearrange_backward, NONE, 0)       \
    X(TRIU, triu, NONE, PROMOTE, "TriuBackward0", NOTHING, rearrange_backward, NONE, 0)       \
    X(MASKED_SELECT, masked_select, NONE, PROMOTE, "MaskedSelectBackward0", FN,               \
      masked_backward, NONE, 0)                                                               \
    X(MASKED_SCATTER, masked_scatter, NONE, PROMOTE, "MaskedScatterBackward0", FN,            \
      masked_backward, NONE, 0)                                                               \
    X(INDEX_ADD, index_add, NONE, PROMOTE, "IndexAddBackward0", FN, index_update_backward,    \
      NONE, 0)                                                                                \
    X(INDEX_COPY, index_copy, NONE, PROMOTE, "IndexCopyBackward0", FN, index_update_backward, \
      NONE, 0)                                                                                \
    X(INDEX_FILL, index_fill, NONE, PROMOTE, "IndexFillBackward0", FN, index_update_backward, \
      NONE, 0)                                                                                \
    X(CLAMP_TENSOR, clamp_tensor, NONE, PROMOTE, "ClampBackward0", FN, clamp_tensor_backward, \
      NONE, 0)                                                                                \
    X(UNFOLD, unfold, NONE, PROMOTE, "UnfoldBackward0", NOTHING, unfold_backward, NONE, 0)

/* The rows with kernel ids, in id order (after the core's, weft/dispatch.h). */
#define WEFT_OP_TABLE(X)                                                                      \
    WEFT_OPS_SEQUENCE(X) WEFT_OPS_UNARY(X) WEFT_OPS_BINARY(X) WEFT_OPS_SELECT(X)              \
    WEFT_OPS_REDUCE(X) WEFT_OPS_OTHER(X)

#endif
