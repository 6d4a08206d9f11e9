/* DLPack (weft/dlpack.h): export and import without copies, who frees what and when,
 * every dtype, strides and byte_offset, both managed-tensor versions. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

TestSuite(dlpack, .init = tu_setup, .fini = tu_teardown);

Test(dlpack, export_shares_memory_and_describes_the_view)
{
    weft_tensor *x = weft_arange(0, 12, 1, WEFT_F32, WEFT_CPU);
    weft_tensor *v = weft_view(x, 2, (int64_t[]){3, 4});
    weft_tensor *vt = weft_t(v);
    weft_tensor *t = weft_narrow(vt, 0, 1, 2); /* [2, 3], strides [1, 4], offset 1 */
    DLManagedTensor *m = weft_to_dlpack(t);
    cr_assert_not_null(m, "%s", weft_error_message());
    const DLTensor *d = &m->dl_tensor;
    cr_assert_eq(d->device.device_type, kDLCPU);
    cr_assert_eq(d->device.device_id, 0);
    cr_assert_eq(d->ndim, 2);
    cr_assert(d->shape[0] == 2 && d->shape[1] == 3);
    cr_assert(d->strides[0] == 1 && d->strides[1] == 4);
    cr_assert(d->dtype.code == kDLFloat && d->dtype.bits == 32 && d->dtype.lanes == 1);
    cr_assert_eq(d->data, weft_tensor_data(t));
    cr_assert_eq(d->byte_offset, 0);
    cr_assert_eq(((float *)d->data)[4], 5.0f); /* element [0, 1] */

    /* the storage outlives every weft reference while the consumer holds it */
    weft_tensor_release(t);
    weft_tensor_release(vt);
    weft_tensor_release(v);
    weft_tensor_release(x);
    ((float *)m->dl_tensor.data)[0] = 42; /* still valid memory (ASan checks) */
    cr_assert_eq(((float *)m->dl_tensor.data)[4], 5.0f);
    m->deleter(m);
}

Test(dlpack, versioned_export_says_1_0_and_not_read_only)
{
    weft_tensor *x = weft_ones(1, (int64_t[]){5}, WEFT_I64, WEFT_CPU);
    DLManagedTensorVersioned *m = weft_to_dlpack_versioned(x);
    cr_assert_not_null(m);
    cr_assert_eq(m->version.major, 1);
    cr_assert_eq(m->version.minor, 0);
    cr_assert_eq(m->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0);
    cr_assert(m->dl_tensor.dtype.code == kDLInt && m->dl_tensor.dtype.bits == 64);
    weft_tensor_release(x);
    m->deleter(m);
}

Test(dlpack, every_dtype_round_trips_without_a_copy)
{
    const struct {
        enum weft_dtype dt;
        uint8_t code, bits;
    } cases[] = {
        {WEFT_BOOL, kDLBool, 8},  {WEFT_U8, kDLUInt, 8},    {WEFT_I8, kDLInt, 8},
        {WEFT_I16, kDLInt, 16},   {WEFT_I32, kDLInt, 32},   {WEFT_I64, kDLInt, 64},
        {WEFT_F16, kDLFloat, 16}, {WEFT_BF16, kDLBfloat, 16}, {WEFT_F32, kDLFloat, 32},
        {WEFT_F64, kDLFloat, 64},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        weft_scope_push();
        weft_tensor *x = weft_to_dtype(weft_arange(0, 6, 1, WEFT_F64, WEFT_CPU), cases[i].dt);
        DLManagedTensor *m = weft_to_dlpack(x);
        cr_assert_not_null(m, "%s", weft_dtype_name(cases[i].dt));
        cr_assert_eq(m->dl_tensor.dtype.code, cases[i].code, "%s", weft_dtype_name(cases[i].dt));
        cr_assert_eq(m->dl_tensor.dtype.bits, cases[i].bits);
        weft_tensor *y = weft_from_dlpack(m); /* weft owns m now */
        cr_assert_not_null(y, "%s: %s", weft_dtype_name(cases[i].dt), weft_error_message());
        cr_assert_eq(weft_tensor_dtype(y), cases[i].dt);
        cr_assert_eq(weft_tensor_data(y), weft_tensor_data(x), "no copy");
        double a[6], b[6];
        tu_read(x, a);
        tu_read(y, b);
        cr_assert_arr_eq(a, b, sizeof a);
        weft_scope_pop();
    }
}

/* A producer's managed tensor, as another framework would hand one over. */
struct producer {
    DLManagedTensor m;
    DLManagedTensorVersioned v;
    int64_t shape[2], strides[2];
    float buf[16];
    int deleted;
};

static void producer_deleter(DLManagedTensor *self)
{
    ((struct producer *)self->manager_ctx)->deleted++;
}

static void producer_deleter_v(DLManagedTensorVersioned *self)
{
    ((struct producer *)self->manager_ctx)->deleted++;
}

static void producer_init(struct producer *p)
{
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 16; i++)
        p->buf[i] = (float)i;
    /* a [2, 3] view with strides [4, 2], starting 3 floats in, given by byte_offset */
    p->shape[0] = 2;
    p->shape[1] = 3;
    p->strides[0] = 4;
    p->strides[1] = 2;
    DLTensor dl = {
        .data = p->buf,
        .device = {kDLCPU, 0},
        .ndim = 2,
        .dtype = {kDLFloat, 32, 1},
        .shape = p->shape,
        .strides = p->strides,
        .byte_offset = 3 * sizeof(float),
    };
    p->m = (DLManagedTensor){.dl_tensor = dl, .manager_ctx = p, .deleter = producer_deleter};
    p->v = (DLManagedTensorVersioned){.version = {1, 0}, .manager_ctx = p,
                                      .deleter = producer_deleter_v, .dl_tensor = dl};
}

Test(dlpack, import_honours_strides_and_byte_offset_and_calls_the_deleter_once_at_the_end)
{
    struct producer p;
    producer_init(&p);
    weft_tensor *t = weft_from_dlpack(&p.m);
    cr_assert_not_null(t, "%s", weft_error_message());
    tu_assert_shape(t, 2, (int64_t[]){2, 3});
    tu_assert_close(t, (double[]){3, 5, 7, 7, 9, 11}, 6, 0, 0);
    weft_tensor *view = weft_select(t, 0, 1); /* a view keeps the producer's memory too */
    weft_tensor_release(t);
    cr_assert_eq(p.deleted, 0);
    /* zero-copy both ways: a write through weft is seen by the producer */
    weft_tensor *minus1 = weft_scalar_tensor(-1.0, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_copy_(view, minus1), 0);
    weft_tensor_release(minus1);
    cr_assert_eq(p.buf[7], -1.0f);
    cr_assert_eq(p.buf[11], -1.0f);
    weft_tensor_release(view);
    cr_assert_eq(p.deleted, 1);
}

Test(dlpack, versioned_import_and_what_it_refuses)
{
    struct producer p;
    producer_init(&p);
    weft_tensor *t = weft_from_dlpack_versioned(&p.v);
    cr_assert_not_null(t, "%s", weft_error_message());
    tu_assert_close(t, (double[]){3, 5, 7, 7, 9, 11}, 6, 0, 0);
    weft_tensor_release(t);
    cr_assert_eq(p.deleted, 1);

    producer_init(&p);
    p.v.version.major = 2;
    cr_assert_null(weft_from_dlpack_versioned(&p.v));
    tu_assert_error(WEFT_ERR_VALUE, "DLPack version 2.0 is not supported");
    p.v.version.major = 1;
    p.v.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    cr_assert_null(weft_from_dlpack_versioned(&p.v));
    tu_assert_error(WEFT_ERR_VALUE, "read-only");
    cr_assert_eq(p.deleted, 0, "a refused tensor stays the caller's");
}

Test(dlpack, import_refusals_name_the_dtype_or_device_and_leave_ownership)
{
    struct producer p;
    producer_init(&p);
    p.m.dl_tensor.dtype = (DLDataType){kDLComplex, 64, 1};
    cr_assert_null(weft_from_dlpack(&p.m));
    tu_assert_error(WEFT_ERR_TYPE, "code 5, 64 bits");
    p.m.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 4};
    cr_assert_null(weft_from_dlpack(&p.m));
    tu_assert_error(WEFT_ERR_TYPE, "4 lanes");
    p.m.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 1};
    p.m.dl_tensor.device = (DLDevice){kDLVulkan, 0};
    cr_assert_null(weft_from_dlpack(&p.m));
    tu_assert_error(WEFT_ERR_DEVICE, "device type 7");
    p.m.dl_tensor.device = (DLDevice){kDLCPU, 0};
    p.strides[1] = -1;
    cr_assert_null(weft_from_dlpack(&p.m));
    tu_assert_error(WEFT_ERR_VALUE, "negative strides");
    cr_assert_null(weft_from_dlpack(NULL));
    tu_assert_error(WEFT_ERR_VALUE, "no managed tensor");
    cr_assert_eq(p.deleted, 0);
}

Test(dlpack, null_strides_mean_row_major_and_pinned_host_memory_is_cpu)
{
    struct producer p;
    producer_init(&p);
    p.m.dl_tensor.strides = NULL;
    p.m.dl_tensor.byte_offset = 0;
    p.m.dl_tensor.device = (DLDevice){kDLCUDAHost, 0};
    weft_tensor *t = weft_from_dlpack(&p.m);
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert(weft_device_equal(weft_tensor_device(t), WEFT_CPU));
    tu_assert_close(t, (double[]){0, 1, 2, 3, 4, 5}, 6, 0, 0);
    weft_tensor_release(t);
    cr_assert_eq(p.deleted, 1);
}

Test(dlpack, cuda_memory_becomes_a_cuda_tensor_without_touching_it)
{
    /* No GPU needed: the pointer is never dereferenced, only described. */
    struct producer p;
    producer_init(&p);
    p.m.dl_tensor.device = (DLDevice){kDLCUDA, 1};
    /* without a backend that registered kDLCUDA, it names no device */
    cr_assert_null(weft_from_dlpack(&p.m));
    tu_assert_error(WEFT_ERR_DEVICE, "unsupported DLPack device type 2");
    weft_error_clear();
    /* what the cuda plugin does when it loads */
    int cuda = weft_device_type_id("cuda", true);
    cr_assert_eq(weft_dlpack_register_device_type(cuda, kDLCUDA), 0, "%s", weft_error_message());
    cr_assert_eq(weft_dlpack_register_device_type(cuda, kDLCUDA), 0, "again: a no-op");
    cr_assert_neq(weft_dlpack_register_device_type(weft_device_type_id("other", true), kDLCUDA), 0);
    weft_error_clear();
    weft_tensor *t = weft_from_dlpack(&p.m);
    cr_assert_not_null(t, "%s", weft_error_message());
    char buf[32];
    cr_assert_str_eq(weft_device_str(weft_tensor_device(t), buf, sizeof buf), "cuda:1");
    DLManagedTensor *back = weft_to_dlpack(t); /* and back out as kDLCUDA */
    cr_assert_not_null(back);
    cr_assert_eq(back->dl_tensor.device.device_type, kDLCUDA);
    cr_assert_eq(back->dl_tensor.device.device_id, 1);
    weft_tensor_release(t);
    cr_assert_eq(p.deleted, 0, "the exported copy still holds the storage");
    back->deleter(back);
    cr_assert_eq(p.deleted, 1);
}

Test(dlpack, export_refuses_tensors_that_require_grad)
{
    weft_tensor *x = weft_zeros(1, (int64_t[]){3}, WEFT_F32, WEFT_CPU);
    weft_requires_grad_(x, true);
    cr_assert_null(weft_to_dlpack(x));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Can't export tensors that require gradient, use tensor.detach()");
    weft_tensor *d = weft_detach(x);
    DLManagedTensor *m = weft_to_dlpack(d);
    cr_assert_not_null(m);
    m->deleter(m);
    weft_tensor_release(d);
    weft_tensor_release(x);
}

Test(dlpack, empty_and_zero_dim_tensors)
{
    weft_tensor *e = weft_empty(2, (int64_t[]){0, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *y = weft_from_dlpack(weft_to_dlpack(e));
    cr_assert_not_null(y, "%s", weft_error_message());
    tu_assert_shape(y, 2, (int64_t[]){0, 3});
    weft_tensor_release(y);
    weft_tensor_release(e);
    weft_tensor *s = weft_scalar_tensor(2.5, WEFT_F64, WEFT_CPU);
    y = weft_from_dlpack(weft_to_dlpack(s));
    cr_assert_not_null(y);
    cr_assert_eq(weft_tensor_ndim(y), 0);
    tu_assert_close(y, (double[]){2.5}, 1, 0, 0);
    weft_tensor_release(y);
    weft_tensor_release(s);
}
