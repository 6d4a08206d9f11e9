/* ONNX export (weft/onnx.h) without ONNX Runtime: the protobuf encoder's wire format,
 * a model read back by a decoder written here from onnx.proto (names, dims, symbolic
 * dims, weights byte for byte, external data at aligned offsets), and the refusals: a
 * type without an onnx_export method, an LSTM's proj_size, uneven adaptive pooling, bad
 * options, the 2 GiB limit, an unwritable path; none leaves a file. Models are checked
 * against ONNX Runtime and onnx.checker in tests/onnx-export.sh. */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <weft/onnx.h>

#include "pb.h"

TestSuite(onnx, .init = tu_setup, .fini = tu_teardown);

/* ---- the encoder ------------------------------------------------------------------------ */

/* The bytes m writes, into buf; their count. */
static size_t written(const struct pb *m, unsigned char *buf, size_t size)
{
    char *data = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&data, &n);
    cr_assert(f);
    cr_assert_eq(pb_write(m, f), 0);
    fclose(f);
    cr_assert_leq(n, size);
    memcpy(buf, data, n);
    free(data);
    return n;
}

Test(onnx, protobuf_wire_format)
{
    struct pb m = PB_INIT;
    pb_int(&m, 1, 150);         /* the protobuf docs' example: 08 96 01 */
    pb_int(&m, 2, -1);          /* int64 -1: ten bytes */
    pb_string(&m, 3, "hi");
    pb_float(&m, 4, 1.0f);
    unsigned char buf[64];
    size_t n = written(&m, buf, sizeof buf);
    const unsigned char want[] = {0x08, 0x96, 0x01, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0x01, 0x1a, 0x02, 'h',  'i',  0x25, 0x00,
                                  0x00, 0x80, 0x3f};
    cr_assert_eq(n, sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
    cr_assert_eq(m.size, sizeof want);
    pb_free(&m);
}

Test(onnx, protobuf_referenced_bytes_in_nested_messages)
{
    /* the referenced bytes are read at write time, in place, inside two levels */
    char data[] = "abcdef";
    struct pb inner = PB_INIT, mid = PB_INIT, outer = PB_INIT;
    pb_int(&inner, 1, 7);
    pb_bytes_ref(&inner, 2, data, 6);
    pb_int(&inner, 3, 9);
    pb_message(&mid, 5, &inner);
    pb_int(&outer, 1, 1);
    pb_message(&outer, 2, &mid);
    data[0] = 'A'; /* changed after encoding: the write sees it */
    unsigned char buf[64];
    size_t n = written(&outer, buf, sizeof buf);
    const unsigned char want[] = {0x08, 0x01, 0x12, 0x0e, 0x2a, 0x0c, 0x08, 0x07, 0x12, 0x06,
                                  'A',  'b',  'c',  'd',  'e',  'f',  0x18, 0x09};
    cr_assert_eq(n, sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
    cr_assert_eq(outer.size, sizeof want);
    cr_assert_eq(outer.len, sizeof want - 6, "the 6 referenced bytes were not copied");
    pb_free(&inner);
    pb_free(&mid);
    pb_free(&outer);
}

/* ---- a decoder, from onnx.proto ---------------------------------------------------------- */

struct msg {
    const unsigned char *p;
    size_t n;
};

struct field {
    unsigned num, wire;
    uint64_t v;     /* varint and fixed values */
    struct msg sub; /* length-delimited */
};

static uint64_t varint(const unsigned char **p, const unsigned char *end)
{
    uint64_t v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
    }
    return v;
}

/* The k-th field numbered num of m (k from 0); false when there is none. */
static bool nth(struct msg m, unsigned num, int k, struct field *out)
{
    const unsigned char *p = m.p, *end = m.p + m.n;
    while (p < end) {
        uint64_t key = varint(&p, end);
        struct field f = {(unsigned)(key >> 3), (unsigned)(key & 7), 0, {0}};
        switch (f.wire) {
        case 0: f.v = varint(&p, end); break;
        case 1: memcpy(&f.v, p, 8); p += 8; break;
        case 5: memcpy(&f.v, p, 4); p += 4; break;
        case 2:
            f.sub.n = varint(&p, end);
            f.sub.p = p;
            p += f.sub.n;
            break;
        default: cr_assert_fail("wire type %u", f.wire);
        }
        cr_assert_leq(p, end, "a field runs past its message");
        if (f.num == num && k-- == 0) {
            *out = f;
            return true;
        }
    }
    return false;
}

static int count(struct msg m, unsigned num)
{
    struct field f;
    int k = 0;
    while (nth(m, num, k, &f))
        k++;
    return k;
}

static struct msg sub(struct msg m, unsigned num, int k)
{
    struct field f;
    cr_assert(nth(m, num, k, &f), "no field %u #%d", num, k);
    return f.sub;
}

static uint64_t value(struct msg m, unsigned num)
{
    struct field f;
    cr_assert(nth(m, num, 0, &f), "no field %u", num);
    return f.v;
}

static bool str_is(struct msg s, const char *want)
{
    return s.n == strlen(want) && memcmp(s.p, want, s.n) == 0;
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(*n ? *n : 1);
    cr_assert_eq(fread(buf, 1, *n, f), *n);
    fclose(f);
    return buf;
}

/* The initializer (TensorProto) named name in graph g. */
static struct msg initializer(struct msg g, const char *name)
{
    for (int k = 0; k < count(g, 5); k++) {
        struct msg t = sub(g, 5, k);
        if (str_is(sub(t, 8, 0), name))
            return t;
    }
    cr_assert_fail("no initializer %s", name);
    return (struct msg){0};
}

/* "batch,4": a ValueInfoProto's dims. */
static void dims_of(struct msg vi, char *buf, size_t size)
{
    struct msg shape = sub(sub(sub(vi, 2, 0), 1, 0), 2, 0);
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < count(shape, 1); d++) {
        struct msg dim = sub(shape, 1, d);
        struct field f;
        if (nth(dim, 2, 0, &f))
            used += (size_t)snprintf(buf + used, size - used, "%s%.*s", d ? "," : "",
                                     (int)f.sub.n, (const char *)f.sub.p);
        else
            used += (size_t)snprintf(buf + used, size - used, "%s%llu", d ? "," : "",
                                     (unsigned long long)value(dim, 1));
    }
}

/* ---- exports ----------------------------------------------------------------------------- */

static weft_module *small_mlp(void)
{
    weft_manual_seed(3);
    weft_module *layers[3] = {weft_nn_linear(4, 3, true), weft_nn_relu(), weft_nn_linear(3, 2, true)};
    weft_module *m = weft_nn_sequential(3, layers);
    cr_assert(m);
    return m;
}

static weft_tensor *example(int64_t batch, int64_t features)
{
    return weft_randn(2, (int64_t[]){batch, features}, WEFT_F32, WEFT_CPU);
}

static int files_in(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

Test(onnx, mlp_reads_back_as_onnx_says)
{
    const char *dir = tu_tmpdir_create("onnx");
    weft_module *m = small_mlp();
    weft_scope_push();
    cr_assert_eq(weft_onnx_export(m, example(2, 4), NULL, tu_tmp_path("m.onnx")), 0, "%s",
                 weft_error_message());
    weft_scope_pop();
    size_t n;
    char *bytes = read_file(tu_tmp_path("m.onnx"), &n);
    struct msg model = {(const unsigned char *)bytes, n};
    cr_assert_eq(value(model, 1), 8, "IR 8");
    cr_assert(str_is(sub(model, 2, 0), "weft"));
    struct msg opset = sub(model, 8, 0);
    cr_assert_eq(value(opset, 2), 17);
    struct msg g = sub(model, 7, 0);
    /* nodes: Gemm(transB=1), Relu, Gemm */
    cr_assert_eq(count(g, 1), 3);
    const char *ops[3] = {"Gemm", "Relu", "Gemm"};
    for (int k = 0; k < 3; k++)
        cr_assert(str_is(sub(sub(g, 1, k), 4, 0), ops[k]), "node %d", k);
    struct msg attr = sub(sub(g, 1, 0), 5, 0);
    cr_assert(str_is(sub(attr, 1, 0), "transB"));
    cr_assert_eq(value(attr, 3), 1);
    cr_assert_eq(value(attr, 20), 2, "type INT");
    /* the weights under their state_dict names, byte for byte */
    cr_assert_eq(count(g, 5), 4);
    const char *names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
    const weft_module *owners[4] = {weft_module_child(m, "0"), weft_module_child(m, "0"),
                                    weft_module_child(m, "2"), weft_module_child(m, "2")};
    for (int k = 0; k < 4; k++) {
        struct msg t = initializer(g, names[k]);
        const weft_tensor *w = weft_module_parameter(owners[k], strchr(names[k], '.') + 1);
        cr_assert_eq(count(t, 1), w->ndim);
        for (int d = 0; d < w->ndim; d++) {
            struct field f;
            cr_assert(nth(t, 1, d, &f));
            cr_assert_eq((int64_t)f.v, w->shape[d]);
        }
        cr_assert_eq(value(t, 2), 1, "FLOAT");
        struct msg raw = sub(t, 9, 0);
        cr_assert_eq(raw.n, (size_t)weft_tensor_numel(w) * 4);
        cr_assert_eq(memcmp(raw.p, weft_tensor_data(w), raw.n), 0, "%s's bytes", names[k]);
    }
    /* input [batch, 4] and output [batch, 2] */
    char dims[64];
    cr_assert(str_is(sub(sub(g, 11, 0), 1, 0), "input"));
    dims_of(sub(g, 11, 0), dims, sizeof dims);
    cr_assert_str_eq(dims, "batch,4");
    cr_assert(str_is(sub(sub(g, 12, 0), 1, 0), "output"));
    dims_of(sub(g, 12, 0), dims, sizeof dims);
    cr_assert_str_eq(dims, "batch,2");
    cr_assert_eq(files_in(dir), 1, "no temporary file is left");
    free(bytes);
    weft_module_free(m);
    tu_tmpdir_remove();
}

Test(onnx, fixed_batch_and_opset_and_names)
{
    tu_tmpdir_create("onnx");
    weft_module *m = small_mlp();
    struct weft_onnx_options o = weft_onnx_defaults();
    o.batch = 5;
    o.opset = 20;
    o.input_name = "features";
    o.output_name = "scores";
    weft_scope_push();
    cr_assert_eq(weft_onnx_export(m, example(5, 4), &o, tu_tmp_path("m.onnx")), 0, "%s",
                 weft_error_message());
    weft_scope_pop();
    size_t n;
    char *bytes = read_file(tu_tmp_path("m.onnx"), &n);
    struct msg model = {(const unsigned char *)bytes, n}, g = sub(model, 7, 0);
    cr_assert_eq(value(model, 1), 9, "opset 20 goes with IR 9");
    cr_assert_eq(value(sub(model, 8, 0), 2), 20);
    char dims[64];
    cr_assert(str_is(sub(sub(g, 11, 0), 1, 0), "features"));
    dims_of(sub(g, 11, 0), dims, sizeof dims);
    cr_assert_str_eq(dims, "5,4");
    cr_assert(str_is(sub(sub(g, 12, 0), 1, 0), "scores"));
    dims_of(sub(g, 12, 0), dims, sizeof dims);
    cr_assert_str_eq(dims, "5,2");
    free(bytes);
    weft_module_free(m);
    tu_tmpdir_remove();
}

Test(onnx, training_mode_is_restored)
{
    tu_tmpdir_create("onnx");
    weft_module *m = small_mlp();
    weft_module_train(m, true);
    weft_scope_push();
    cr_assert_eq(weft_onnx_export(m, example(2, 4), NULL, tu_tmp_path("m.onnx")), 0);
    weft_scope_pop();
    cr_assert(weft_module_is_training(m));
    weft_module_free(m);
    tu_tmpdir_remove();
}

/* The export fails with code and message, leaving dir empty. */
static void assert_refused(weft_module *m, weft_tensor *x, const struct weft_onnx_options *o,
                           int code, const char *message)
{
    const char *dir = tu_tmp_path("");
    cr_assert_neq(weft_onnx_export(m, x, o, tu_tmp_path("m.onnx")), 0);
    tu_assert_error(code, message);
    cr_assert_eq(files_in(dir), 0, "a failed export leaves no file");
}

static weft_tensor *mystery_forward(weft_module *m, weft_tensor *x)
{
    (void)m;
    return weft_neg(x);
}

Test(onnx, a_type_without_onnx_export_is_named)
{
    static const struct weft_module_type mystery = {
        .base = WEFT_VTABLE(WEFT_KIND_MODULE, "mystery", struct weft_module_type),
        .class_name = "Mystery",
        .forward = mystery_forward,
    };
    tu_tmpdir_create("onnx");
    weft_module *layers[2] = {weft_nn_linear(4, 3, true), weft_module_new(&mystery, NULL)};
    weft_module *m = weft_nn_sequential(2, layers);
    weft_scope_push();
    assert_refused(m, example(2, 4), NULL, WEFT_ERR_NOT_IMPLEMENTED,
                   "ONNX export: layer 1 (Mystery): Mystery has no ONNX export (its module type "
                   "'mystery' has no onnx_export method)");
    weft_scope_pop();
    weft_module_free(m);
    tu_tmpdir_remove();
}

Test(onnx, lstm_proj_size_is_refused_by_name)
{
    tu_tmpdir_create("onnx");
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, 3, 8);
    o.proj_size = 4;
    o.batch_first = true;
    weft_module *m = weft_nn_rnn(&o);
    cr_assert(m);
    weft_scope_push();
    assert_refused(m, weft_randn(3, (int64_t[]){2, 5, 3}, WEFT_F32, WEFT_CPU), NULL,
                   WEFT_ERR_NOT_IMPLEMENTED,
                   "the model (LSTM): LSTM(proj_size=4) cannot be exported: ONNX's LSTM has no "
                   "projection of the hidden state (proj_size)");
    weft_scope_pop();
    weft_module_free(m);
    tu_tmpdir_remove();
}

Test(onnx, uneven_adaptive_pooling_is_refused)
{
    tu_tmpdir_create("onnx");
    weft_module *m = weft_nn_adaptive_avg_pool2d(3, 3);
    weft_scope_push();
    assert_refused(m, weft_randn(4, (int64_t[]){2, 1, 7, 7}, WEFT_F32, WEFT_CPU), NULL,
                   WEFT_ERR_NOT_IMPLEMENTED,
                   "AdaptiveAvgPool2d(output_size=(3, 3)) on 7x7 inputs pools windows of unequal "
                   "sizes");
    weft_scope_pop();
    weft_module_free(m);
    tu_tmpdir_remove();
}

Test(onnx, bad_options_are_refused)
{
    tu_tmpdir_create("onnx");
    weft_module *m = small_mlp();
    struct weft_onnx_options o = weft_onnx_defaults();
    weft_scope_push();
    o.opset = 16;
    assert_refused(m, example(2, 4), &o, WEFT_ERR_VALUE, "opset 16 is not supported: weft writes "
                                                         "opsets 17 to 21");
    o = weft_onnx_defaults();
    o.batch = 4;
    assert_refused(m, example(2, 4), &o, WEFT_ERR_VALUE,
                   "batch is fixed at 4, but the example input is [2, 4]");
    o = weft_onnx_defaults();
    o.seq = 8;
    assert_refused(m, example(2, 4), &o, WEFT_ERR_VALUE, "seq applies to a model of token ids");
    assert_refused(m, example(2, 5), NULL, WEFT_ERR_RUNTIME, "the example input does not fit");
    weft_scope_pop();
    weft_module_free(m);
    tu_tmpdir_remove();
}

Test(onnx, above_the_limit_without_external_data_is_refused)
{
    tu_tmpdir_create("onnx");
    weft_module *m = small_mlp();
    struct weft_onnx_options o = weft_onnx_defaults();
    o.max_inline_bytes = 64; /* stands for protobuf's 2 GiB */
    o.external_data = WEFT_ONNX_EXTERNAL_NEVER;
    weft_scope_push();
    assert_refused(m, example(2, 4), &o, WEFT_ERR_VALUE,
                   "export its weights as external data (--external-data, options.external_data)");
    weft_scope_pop();
    weft_module_free(m);
    tu_tmpdir_remove();
}

Test(onnx, above_the_limit_the_weights_go_to_external_data)
{
    tu_tmpdir_create("onnx");
    weft_manual_seed(1);
    weft_module *layers[2] = {weft_nn_linear(64, 32, true), weft_nn_linear(32, 8, false)};
    weft_module *m = weft_nn_sequential(2, layers);
    struct weft_onnx_options o = weft_onnx_defaults();
    o.max_inline_bytes = 4096; /* below the 8 KiB of 0.weight */
    weft_scope_push();
    cr_assert_eq(weft_onnx_export(m, example(2, 64), &o, tu_tmp_path("m.onnx")), 0, "%s",
                 weft_error_message());
    weft_scope_pop();
    size_t n, nd;
    char *bytes = read_file(tu_tmp_path("m.onnx"), &n);
    char *data = read_file(tu_tmp_path("m.onnx.data"), &nd);
    struct msg g = sub((struct msg){(const unsigned char *)bytes, n}, 7, 0);
    const char *names[3] = {"0.weight", "0.bias", "1.weight"};
    const weft_tensor *w[3] = {weft_module_parameter(weft_module_child(m, "0"), "weight"),
                               weft_module_parameter(weft_module_child(m, "0"), "bias"),
                               weft_module_parameter(weft_module_child(m, "1"), "weight")};
    for (int k = 0; k < 3; k++) {
        struct msg t = initializer(g, names[k]);
        size_t bytes_k = (size_t)weft_tensor_numel(w[k]) * 4;
        if (bytes_k < 1024) { /* small ones stay in the model */
            cr_assert_eq(count(t, 14), 0, "%s inline", names[k]);
            cr_assert_eq(memcmp(sub(t, 9, 0).p, weft_tensor_data(w[k]), bytes_k), 0);
            continue;
        }
        cr_assert_eq(value(t, 14), 1, "%s: data_location EXTERNAL", names[k]);
        cr_assert_eq(count(t, 9), 0, "no raw_data");
        char location[64] = "", offset[32] = "", length[32] = "";
        for (int e = 0; e < count(t, 13); e++) {
            struct msg kv = sub(t, 13, e), key = sub(kv, 1, 0), val = sub(kv, 2, 0);
            char *slot = str_is(key, "location") ? location : str_is(key, "offset") ? offset : length;
            snprintf(slot, 32, "%.*s", (int)val.n, (const char *)val.p);
        }
        cr_assert_str_eq(location, "m.onnx.data");
        long long off = atoll(offset);
        cr_assert_eq(off % 4096, 0, "aligned offset %lld", off);
        cr_assert_eq((size_t)atoll(length), bytes_k);
        cr_assert_leq(off + (long long)bytes_k, (long long)nd);
        cr_assert_eq(memcmp(data + off, weft_tensor_data(w[k]), bytes_k), 0, "%s's bytes", names[k]);
    }
    free(bytes);
    free(data);
    weft_module_free(m);
    tu_tmpdir_remove();
}

Test(onnx, an_unwritable_path_is_named)
{
    tu_tmpdir_create("onnx");
    weft_module *m = small_mlp();
    weft_scope_push();
    cr_assert_neq(weft_onnx_export(m, example(2, 4), NULL, "/nonexistent-dir/m.onnx"), 0);
    tu_assert_error(WEFT_ERR_IO, "ONNX export: cannot write '/nonexistent-dir/m.onnx'");
    weft_scope_pop();
    weft_module_free(m);
    tu_tmpdir_remove();
}
