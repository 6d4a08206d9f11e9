/* weft/ops.h: tensor operations, PyTorch's semantics and names.
 *
 * Every op checks its arguments (devices agree, dtypes, broadcast shapes), allocates the
 * output on the inputs' device, and runs the kernel registered for (op, device type,
 * layout). Results are new references (see weft/tensor.h for ownership and scopes).
 * In-place variants end in '_', return their first argument (no new reference), bump
 * its version, and require the result to fit its shape and dtype.
 *
 * Type promotion follows torch.result_type. A `double` scalar counts as an integer
 * scalar when it is finite and whole (so int_tensor + 2 stays integral), otherwise as a
 * floating scalar; pass a 0-dim tensor where that distinction matters.
 */
#ifndef WEFT_OPS_H
#define WEFT_OPS_H

#include "weft/op_table.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- random numbers ----------------------------------------------------------------
 * One Philox4x32-10 stream per process, keyed by a seed and advanced by an offset, so
 * every backend draws the same numbers for the same (seed, offset) (weft/philox.h). A
 * random op reserves the blocks it draws (so does dropout, weft/nn.h). */
void weft_manual_seed(uint64_t seed);
uint64_t weft_random_seed(void);
uint64_t weft_random_offset(void);
void weft_random_set_offset(uint64_t offset);
/* Advances the offset by `blocks` Philox blocks atomically; returns where the run starts. */
uint64_t weft_random_reserve(uint64_t blocks);

/* Uniform on [0, 1), as torch.rand (floating dtypes). */
weft_tensor *weft_rand(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev);
/* Standard normal, as torch.randn (floating dtypes). */
weft_tensor *weft_randn(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev);
/* Integers uniform on [low, high), as torch.randint. */
weft_tensor *weft_randint(int64_t low, int64_t high, int ndim, const int64_t *shape,
                          enum weft_dtype dtype, weft_device dev);
/* Uniform on [low, high) filled in place (bumps the version). Returns 0 or negative. */
int weft_uniform_(weft_tensor *t, double low, double high);
int weft_normal_(weft_tensor *t, double mean, double std);

/* ---- sequences (weft/tensor.h: the constant fills) ---------------------------------- */
/* [start, end) by step, length ceil((end - start) / step), as torch.arange. An integer
 * dtype truncates start, end and step first (a step of 0.5 is "step must be nonzero"), and
 * int64 counts the elements from the truncated values, as PyTorch does. */
weft_tensor *weft_arange(double start, double end, double step, enum weft_dtype dtype,
                         weft_device dev);
/* `steps` values evenly from start to end inclusive, as torch.linspace. */
weft_tensor *weft_linspace(double start, double end, int64_t steps, enum weft_dtype dtype,
                           weft_device dev);
/* n x m identity (m < 0 means m = n). */
weft_tensor *weft_eye(int64_t n, int64_t m, enum weft_dtype dtype, weft_device dev);

/* ---- views: new tensors over the same storage; no data moves ------------------------
 * (expand, detach: weft/tensor.h) */

/* Shape may contain one -1. Fails with PyTorch's "view size is not compatible with
 * input tensor's size and stride ..." when no strides can express it. */
weft_tensor *weft_view(weft_tensor *t, int ndim, const int64_t *shape);
/* A view when possible, else a contiguous copy. */
weft_tensor *weft_reshape(weft_tensor *t, int ndim, const int64_t *shape);
weft_tensor *weft_transpose(weft_tensor *t, int dim0, int dim1);
/* Transpose of a tensor of at most 2 dims, as Tensor.t(). */
weft_tensor *weft_t(weft_tensor *t);
weft_tensor *weft_permute(weft_tensor *t, int ndim, const int *dims);
weft_tensor *weft_narrow(weft_tensor *t, int dim, int64_t start, int64_t length);
/* t[start:end:step] along dim with Python's clamping of start/end; step > 0. */
weft_tensor *weft_slice(weft_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
weft_tensor *weft_select(weft_tensor *t, int dim, int64_t index);
weft_tensor *weft_squeeze(weft_tensor *t);          /* all size-1 dims */
weft_tensor *weft_squeeze_dim(weft_tensor *t, int dim); /* no-op if size != 1 */
weft_tensor *weft_unsqueeze(weft_tensor *t, int dim);
weft_tensor *weft_flatten(weft_tensor *t, int start_dim, int end_dim);
weft_tensor *weft_unflatten(weft_tensor *t, int dim, int ndim, const int64_t *sizes);
weft_tensor *weft_expand_as(weft_tensor *t, const weft_tensor *other);
/* Checked against the storage: every reachable element must lie inside it. */
weft_tensor *weft_as_strided(weft_tensor *t, int ndim, const int64_t *shape,
                             const int64_t *stride, int64_t offset);
/* Tensor.view(dtype): the same bytes as another dtype, no conversion; a different
 * itemsize rescales the last dim, which must have stride 1. Not recorded. */
weft_tensor *weft_view_dtype(weft_tensor *t, enum weft_dtype dtype);

/* ---- elementwise: one row each in weft/op_table.h ----------------------------------
 * Unary (WEFT_OPS_UNARY): weft_exp(t) and weft_exp_(t), ...; floating-only functions
 * compute integer inputs in the default float dtype. Binary with broadcasting
 * (WEFT_OPS_BINARY): weft_add(a, b), weft_add_(a, b), weft_add_scalar(a, s) and
 * weft_add_scalar_(a, s), ...; div is true division; comparisons give bool. */
#define WEFT_DECLARE_UNARY(ID, name, ...)                                                     \
    weft_tensor *weft_##name(weft_tensor *t);                                                 \
    weft_tensor *weft_##name##_(weft_tensor *t);
WEFT_OPS_UNARY(WEFT_DECLARE_UNARY)
#undef WEFT_DECLARE_UNARY

#define WEFT_DECLARE_BINARY(ID, name, ...)                                                    \
    weft_tensor *weft_##name(weft_tensor *a, weft_tensor *b);                                 \
    weft_tensor *weft_##name##_(weft_tensor *a, weft_tensor *b);                              \
    weft_tensor *weft_##name##_scalar(weft_tensor *a, double b);                              \
    weft_tensor *weft_##name##_scalar_(weft_tensor *a, double b);
WEFT_OPS_BINARY(WEFT_DECLARE_BINARY)
#undef WEFT_DECLARE_BINARY

/* scalar - t and scalar / t (rsub, rdiv), as `2 - t` in Python. */
weft_tensor *weft_rsub_scalar(weft_tensor *t, double s);
weft_tensor *weft_rdiv_scalar(weft_tensor *t, double s);

/* cond ? a : b with broadcasting of all three; cond must be bool (or uint8, nonzero is
 * true, which PyTorch 1.13 still takes). */
weft_tensor *weft_where(weft_tensor *cond, weft_tensor *a, weft_tensor *b);
weft_tensor *weft_where_scalar(weft_tensor *cond, weft_tensor *a, double b);
/* PyTorch's threshold_backward: grad where t > threshold, else 0 (t and grad of one shape
 * and dtype; other shapes broadcast through where). The backward formula of ReLU, for
 * nodes outside the core (nn's fused Linear+ReLU); not itself recorded by autograd. */
weft_tensor *weft_threshold_backward(weft_tensor *grad, weft_tensor *t, double threshold);
/* PyTorch's gelu_backward: grad * gelu'(x), approximate 0 for the erf form (the GELU op),
 * 1 for the tanh form (F.gelu(x, approximate='tanh')); grad and x of one shape and
 * floating dtype. One pass where the backend has the gelu_backward kernel (weft/kernel.h),
 * else composed of ops; not itself recorded by autograd. */
weft_tensor *weft_gelu_backward(weft_tensor *grad, weft_tensor *x, int approximate);
/* torch.floor_divide and torch.remainder (Python's // and %), broadcasting with add's type
 * promotion: the quotient rounds toward -inf, the remainder has the divisor's sign. An
 * integer divided by 0 is "ZeroDivisionError"; floats give IEEE's inf/NaN. remainder is
 * differentiable (RemainderBackward0/1); floor_divide records a "NotImplemented" node whose
 * backward fails, as PyTorch's does. */
weft_tensor *weft_floor_divide(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_floor_divide_scalar(weft_tensor *a, double b);
weft_tensor *weft_remainder(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_remainder_scalar(weft_tensor *a, double b);
/* Bounds given as NAN mean "no bound" (torch.clamp's None); at least one must be set. */
weft_tensor *weft_clamp(weft_tensor *t, double min, double max);
weft_tensor *weft_clamp_(weft_tensor *t, double min, double max);
/* t with value where mask (bool, or the deprecated uint8; broadcast to t) is true. The
 * value must fit t's dtype: "value cannot be converted to type uint8_t without overflow". */
weft_tensor *weft_masked_fill(weft_tensor *t, weft_tensor *mask, double value);
weft_tensor *weft_masked_fill_(weft_tensor *t, weft_tensor *mask, double value);

/* ---- reductions ----------------------------------------------------------------------
 * `dims` lists the dims to reduce (ndims == 0 reduces all, as dim=None); keepdim keeps
 * them with size 1. Sums and products of bool/integers are int64. */
weft_tensor *weft_sum(weft_tensor *t, int ndims, const int *dims, bool keepdim);
weft_tensor *weft_mean(weft_tensor *t, int ndims, const int *dims, bool keepdim);
weft_tensor *weft_prod(weft_tensor *t, int ndims, const int *dims, bool keepdim);
/* Variance/std with Bessel-style `correction` (1 = unbiased, torch's default). */
weft_tensor *weft_var(weft_tensor *t, int ndims, const int *dims, double correction,
                      bool keepdim);
weft_tensor *weft_std(weft_tensor *t, int ndims, const int *dims, double correction,
                      bool keepdim);
weft_tensor *weft_all(weft_tensor *t, int ndims, const int *dims, bool keepdim);
weft_tensor *weft_any(weft_tensor *t, int ndims, const int *dims, bool keepdim);
/* Max/min of all elements (0-dim result); errors on empty input like PyTorch. */
weft_tensor *weft_max(weft_tensor *t);
weft_tensor *weft_min(weft_tensor *t);
/* Max/min along one dim with int64 indices of the first occurrence; either out pointer
 * may be NULL. Returns 0 or negative. */
int weft_max_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values,
                 weft_tensor **indices);
int weft_min_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values,
                 weft_tensor **indices);
weft_tensor *weft_argmax(weft_tensor *t, int dim, bool keepdim);
weft_tensor *weft_argmin(weft_tensor *t, int dim, bool keepdim);
/* Index into the flattened tensor, as argmax(dim=None). */
weft_tensor *weft_argmax_all(weft_tensor *t);
weft_tensor *weft_argmin_all(weft_tensor *t);

/* log(sum(exp(t))) over dims (ndims == 0: all), as torch.logsumexp: the maximum is taken
 * out first (infinite maxima as 0, so a row of -inf gives -inf and one holding +inf gives
 * +inf); bool and integer inputs give the default floating dtype. */
weft_tensor *weft_logsumexp(weft_tensor *t, int ndims, const int *dims, bool keepdim);

/* ---- softmax ------------------------------------------------------------------------ */
weft_tensor *weft_softmax(weft_tensor *t, int dim);
weft_tensor *weft_log_softmax(weft_tensor *t, int dim);

/* ---- linear algebra --------------------------------------------------------------------
 * torch.matmul: 1-D x 1-D dot, 2-D x 2-D mm, 1-D operands promoted and squeezed, batch
 * dims broadcast. */
weft_tensor *weft_matmul(weft_tensor *a, weft_tensor *b);
/* torch.mm (2-D x 2-D) and torch.bmm (3-D x 3-D, equal batch), with PyTorch's checks and
 * texts ("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"), no broadcasting. */
weft_tensor *weft_mm(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_bmm(weft_tensor *a, weft_tensor *b);
/* torch.addmm: beta * input + alpha * (mat1 @ mat2), mat1 [n, m], mat2 [m, p], input
 * expandable to [n, p] (an error otherwise, as expand's); one dtype ("self and mat2 must
 * have the same dtype"). beta == 0 ignores input (its NaNs too); integer dtypes truncate
 * alpha and beta. torch.baddbmm likewise over batches: batch1 [b, n, m], batch2 [b, m, p],
 * input expandable to [b, n, p] (cast to the batches' dtype, as PyTorch 1.13 does). */
weft_tensor *weft_addmm(weft_tensor *input, weft_tensor *mat1, weft_tensor *mat2, double beta,
                        double alpha);
weft_tensor *weft_baddbmm(weft_tensor *input, weft_tensor *batch1, weft_tensor *batch2,
                          double beta, double alpha);
/* torch.backends.cuda.matmul.allow_tf32: whether float32 matmuls may use TF32 tensor
 * cores (about 10 mantissa bits per product). Off by default, as in PyTorch >= 1.12;
 * [runtime] allow_tf32 sets it. Backends read it at every matmul. */
void weft_set_allow_tf32(bool allow);
bool weft_allow_tf32(void);

/* ---- joining and indexing ------------------------------------------------------------ */
weft_tensor *weft_cat(int n, weft_tensor *const *tensors, int dim);
weft_tensor *weft_stack(int n, weft_tensor *const *tensors, int dim);
/* index: int64 (or int32) 1-D. */
weft_tensor *weft_index_select(weft_tensor *t, int dim, weft_tensor *index);
/* index: int64, same ndim as t. */
weft_tensor *weft_gather(weft_tensor *t, int dim, weft_tensor *index);
weft_tensor *weft_scatter_add(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src);
weft_tensor *weft_scatter_add_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src);
/* Tensor.scatter(dim, index, src) and scatter(dim, index, value): a copy of t with the
 * elements the index names along dim replaced (src: the element at the index's position;
 * value: the scalar cast to t's dtype). index int64, of t's ndim, no larger than src and,
 * outside dim, than t; out-of-range indices are "index 5 is out of bounds for dimension 1
 * with size 3". Of duplicates the last in row-major order wins on the cpu. */
weft_tensor *weft_scatter(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src);
weft_tensor *weft_scatter_value(weft_tensor *t, int dim, weft_tensor *index, double value);
/* Tensor.scatter_reduce: reduce "sum", "prod", "mean", "amax" or "amin" of the scattered
 * values, with t's own value when include_self (else the places written start from the
 * first value scattered there); mean of integers rounds toward -inf. Integral and floating
 * dtypes, and bool (sum and amax are or, prod and amin are and; mean has no kernel). */
weft_tensor *weft_scatter_reduce(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src,
                                 const char *reduce, bool include_self);
/* int64 class indices -> int64 one-hot with a new last dim of num_classes
 * (num_classes < 0: max + 1). */
weft_tensor *weft_one_hot(weft_tensor *t, int64_t num_classes);

/* ---- functions ported programs call (weft/op_table.h's WEFT_OPS_PORTED) ----------------
 * Each with PyTorch's semantics, node and error texts. */

/* torch.cumsum / torch.cumprod along dim; bool and integer inputs give int64 (PyTorch's
 * default). Differentiable (CumprodBackward0 handles zeros as PyTorch does). */
weft_tensor *weft_cumsum(weft_tensor *t, int dim);
weft_tensor *weft_cumprod(weft_tensor *t, int dim);
/* The same with dtype= given: t is cast to dtype before the scan (an integer dtype keeps
 * its width: no int64 promotion), and autocast leaves the op alone, as PyTorch's
 * fp32_set_opt_dtype policy does. The gradient reaches t in t's dtype; an integer or bool
 * result records no node (PyTorch's output does not require grad). */
weft_tensor *weft_cumsum_dtype(weft_tensor *t, int dim, enum weft_dtype dtype);
weft_tensor *weft_cumprod_dtype(weft_tensor *t, int dim, enum weft_dtype dtype);
/* torch.sort(t, dim, descending): values and int64 indices (either pointer may be NULL);
 * NaN sorts above every number; ties keep their order (PyTorch 1.13's cpu sort does too).
 * Returns 0 or negative. Node SortBackward0. */
int weft_sort(weft_tensor *t, int dim, bool descending, weft_tensor **values,
              weft_tensor **indices);
weft_tensor *weft_argsort(weft_tensor *t, int dim, bool descending);
/* torch.sort(t, stable=stable, dim=dim, descending=descending) and torch.argsort(t,
 * stable=stable, ...), PyTorch's overloads that take stable: weft sorts stably either way
 * (stable=False allows any order of ties, and the stable one is such an order). Node
 * SortBackward1, as PyTorch names the stable overload's. */
int weft_sort_stable(weft_tensor *t, bool stable, int dim, bool descending,
                     weft_tensor **values, weft_tensor **indices);
weft_tensor *weft_argsort_stable(weft_tensor *t, bool stable, int dim, bool descending);
/* torch.topk(t, k, dim, largest, sorted=True): the k largest (smallest) along dim, in
 * order; of equal values the first found come first. */
int weft_topk(weft_tensor *t, int64_t k, int dim, bool largest, weft_tensor **values,
              weft_tensor **indices);
/* torch.amax / torch.amin over dims (ndims == 0: all); ties share the gradient evenly. */
weft_tensor *weft_amax(weft_tensor *t, int ndims, const int *dims, bool keepdim);
weft_tensor *weft_amin(weft_tensor *t, int ndims, const int *dims, bool keepdim);
/* torch.flip (a copy, reversed along dims), torch.roll (shifts along dims; ndims == 0
 * rolls the flattened tensor by shifts[0]), torch.tril / torch.triu (the other elements of
 * the last two dims zeroed; diagonal 0 the main one, > 0 above it) and torch.movedim
 * (= moveaxis; a permuted view). */
weft_tensor *weft_flip(weft_tensor *t, int ndims, const int *dims);
weft_tensor *weft_roll(weft_tensor *t, int nshifts, const int64_t *shifts, int ndims,
                       const int *dims);
weft_tensor *weft_tril(weft_tensor *t, int64_t diagonal);
weft_tensor *weft_triu(weft_tensor *t, int64_t diagonal);
weft_tensor *weft_movedim(weft_tensor *t, int nsource, const int *source, int ndestination,
                          const int *destination);
/* Tensor.unfold(dim, size, step): a view with every window of size elements along dim,
 * step apart, as a new last dim. */
weft_tensor *weft_unfold(weft_tensor *t, int dim, int64_t size, int64_t step);

/* torch.nonzero: int64 [count, ndim], the coordinates of the nonzero elements (NaN is
 * nonzero) in row-major order. */
weft_tensor *weft_nonzero(weft_tensor *t);
/* Tensor.masked_select: the elements of t where mask (bool, or the deprecated uint8; the
 * two broadcast) holds, 1-D in row-major order. Tensor.masked_scatter: t (broadcast with
 * the mask) with the elements where mask holds replaced, in order, by source's first
 * ones (source of t's dtype, at least that many elements). */
weft_tensor *weft_masked_select(weft_tensor *t, weft_tensor *mask);
weft_tensor *weft_masked_scatter(weft_tensor *t, weft_tensor *mask, weft_tensor *source);
/* Tensor.index_add (t[.., index[i], ..] += alpha * source[.., i, ..] along dim; int64 or
 * int32 index), index_copy (= source; int64 index) and index_fill (= value; int64 index,
 * negative from the end), and their in-place forms; index 1-D or 0-dim. */
weft_tensor *weft_index_add(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *source,
                            double alpha);
weft_tensor *weft_index_add_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *source,
                             double alpha);
weft_tensor *weft_index_copy(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *source);
weft_tensor *weft_index_copy_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *source);
weft_tensor *weft_index_fill(weft_tensor *t, int dim, weft_tensor *index, double value);
weft_tensor *weft_index_fill_(weft_tensor *t, int dim, weft_tensor *index, double value);
/* torch.isclose: |a - b| <= atol + rtol |b| elementwise (bool), equal elements (infinities
 * too) close, NaNs close to each other only with equal_nan; a and b of one dtype,
 * broadcast. torch.allclose: whether all are, in *result; returns 0 or negative. */
weft_tensor *weft_isclose(weft_tensor *a, weft_tensor *b, double rtol, double atol,
                          bool equal_nan);
int weft_allclose(weft_tensor *a, weft_tensor *b, double rtol, double atol, bool equal_nan,
                  bool *result);
/* torch.clamp(t, min, max) with tensor bounds (either NULL, not both), broadcast and
 * promoted with t; NaN anywhere gives NaN. */
weft_tensor *weft_clamp_tensor(weft_tensor *t, weft_tensor *min, weft_tensor *max);
/* t.clamp_(min, max) with tensor bounds: the same written into t, which must hold the
 * result (its shape: the bounds broadcast to t; its dtype: "result type Float can't be
 * cast to the desired output type Long"). Returns t. Node ClampBackward0. */
weft_tensor *weft_clamp_tensor_(weft_tensor *t, weft_tensor *min, weft_tensor *max);
/* torch.rand_like, randn_like, randint_like: t's shape, dtype, device and layout. */
weft_tensor *weft_rand_like(const weft_tensor *t);
weft_tensor *weft_randn_like(const weft_tensor *t);
weft_tensor *weft_randint_like(const weft_tensor *t, int64_t low, int64_t high);
/* In-place forms PyTorch's methods have: a.floor_divide_(b), a.remainder_(b) (a's dtype
 * must hold the result), t.scatter_(dim, index, src) and t.scatter_(dim, index, value). */
weft_tensor *weft_floor_divide_(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_floor_divide_scalar_(weft_tensor *a, double b);
weft_tensor *weft_remainder_(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_remainder_scalar_(weft_tensor *a, double b);
weft_tensor *weft_scatter_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src);
weft_tensor *weft_scatter_value_(weft_tensor *t, int dim, weft_tensor *index, double value);

/* ---- type promotion ---------------------------------------------------------------------- */
/* torch.promote_types: the smallest dtype both values fit in (u8+i8 -> int16,
 * f16+bf16 -> float32, integer+floating -> the floating type). */
enum weft_dtype weft_promote_types(enum weft_dtype a, enum weft_dtype b);
/* Category of a dtype for result_type with scalars: 0 bool, 1 integral, 2 floating. */
int weft_dtype_category(enum weft_dtype dt);
/* The dtype used to accumulate sums/products of `dt`: int64 for bool and integers,
 * float32 for 16-bit floats, otherwise dt itself. */
enum weft_dtype weft_dtype_accumulate(enum weft_dtype dt);
/* torch.result_type of two tensors (0-dim tensors rank below dimensioned ones). */
enum weft_dtype weft_result_type(const weft_tensor *a, const weft_tensor *b);
enum weft_dtype weft_result_type_scalar(const weft_tensor *a, double s);

/* ---- reading a value back (weft/tensor.h: weft_tensor_read) ---------------------- */
/* The single value of a one-element tensor, converted to double; as Tensor.item(). */
int weft_tensor_item(const weft_tensor *t, double *out);

/* ---- printing ---------------------------------------------------------------------- */

/* PyTorch's repr: "tensor([[1., 2.],\n        [3., 4.]])", dtype suffix unless float32
 * or int64 (or bool), device suffix unless cpu, summarised with "..." past 1000 elements.
 * Returns a malloc'd string the caller frees, or NULL with an error set. */
char *weft_tensor_repr(const weft_tensor *t);
int weft_tensor_print(const weft_tensor *t, FILE *f); /* repr plus newline */
/* The layout's repr of a non-strided tensor (weft/layout.h), or NULL with an error. */
char *weft_layout_repr(const weft_tensor *t);
/* Python's repr(float) of v into buf ("0.1", "1.0", "1e-05", "100000.0", "inf"), for
 * messages that quote a value as PyTorch does. Returns buf. */
const char *weft_repr_float(double v, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
