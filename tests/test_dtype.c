/* tests/test_dtype.c: dtype sizes, names, parsing, 16-bit conversions and PyTorch's
 * promotion rules. */
#include <math.h>

#include "testutil.h"

TestSuite(dtype, .init = tu_setup, .fini = tu_teardown);

Test(dtype, sizes_and_names_match_pytorch)
{
    struct {
        enum weft_dtype dt;
        size_t size;
        const char *name, *torch;
    } cases[] = {
        {WEFT_BOOL, 1, "bool", "Bool"},     {WEFT_U8, 1, "uint8", "Byte"},
        {WEFT_I8, 1, "int8", "Char"},       {WEFT_I16, 2, "int16", "Short"},
        {WEFT_I32, 4, "int32", "Int"},      {WEFT_I64, 8, "int64", "Long"},
        {WEFT_F16, 2, "float16", "Half"},   {WEFT_BF16, 2, "bfloat16", "BFloat16"},
        {WEFT_F32, 4, "float32", "Float"},  {WEFT_F64, 8, "float64", "Double"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cr_expect_eq(weft_dtype_size(cases[i].dt), cases[i].size, "%s", cases[i].name);
        cr_expect_str_eq(weft_dtype_name(cases[i].dt), cases[i].name);
        cr_expect_str_eq(weft_dtype_torch_name(cases[i].dt), cases[i].torch);
        enum weft_dtype parsed;
        cr_expect_eq(weft_dtype_parse(cases[i].name, &parsed), 0);
        cr_expect_eq(parsed, cases[i].dt);
    }
    cr_expect_eq(weft_dtype_size((enum weft_dtype)99), 0);
    cr_expect_str_eq(weft_dtype_name((enum weft_dtype)99), "invalid");
}

Test(dtype, parse_accepts_short_and_torch_spellings)
{
    enum weft_dtype dt;
    cr_expect_eq(weft_dtype_parse("f32", &dt), 0);
    cr_expect_eq(dt, WEFT_F32);
    cr_expect_eq(weft_dtype_parse("torch.bfloat16", &dt), 0);
    cr_expect_eq(dt, WEFT_BF16);
    cr_expect_eq(weft_dtype_parse("double", &dt), 0);
    cr_expect_eq(dt, WEFT_F64);
    cr_expect_eq(weft_dtype_parse("float128", &dt), -1);
}

Test(dtype, promotion_follows_torch_promote_types)
{
    struct {
        enum weft_dtype a, b, expected;
    } cases[] = {
        {WEFT_BOOL, WEFT_BOOL, WEFT_BOOL}, {WEFT_BOOL, WEFT_U8, WEFT_U8},
        {WEFT_U8, WEFT_I8, WEFT_I16},      {WEFT_U8, WEFT_I32, WEFT_I32},
        {WEFT_I8, WEFT_I64, WEFT_I64},     {WEFT_I32, WEFT_F16, WEFT_F16},
        {WEFT_F16, WEFT_BF16, WEFT_F32},   {WEFT_BF16, WEFT_F32, WEFT_F32},
        {WEFT_F32, WEFT_F64, WEFT_F64},    {WEFT_I64, WEFT_F32, WEFT_F32},
        {WEFT_BOOL, WEFT_F16, WEFT_F16},   {WEFT_I16, WEFT_U8, WEFT_I16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cr_expect_eq(weft_promote_types(cases[i].a, cases[i].b), cases[i].expected,
                     "promote(%s, %s) = %s, expected %s", weft_dtype_name(cases[i].a),
                     weft_dtype_name(cases[i].b),
                     weft_dtype_name(weft_promote_types(cases[i].a, cases[i].b)),
                     weft_dtype_name(cases[i].expected));
        cr_expect_eq(weft_promote_types(cases[i].b, cases[i].a), cases[i].expected,
                     "promotion is symmetric");
    }
}

Test(dtype, result_type_ranks_scalars_and_zero_dim_tensors_below_tensors)
{
    const int64_t shape[1] = {3};
    weft_tensor *ints = weft_zeros(1, shape, WEFT_I32, WEFT_CPU);
    weft_tensor *halves = weft_zeros(1, shape, WEFT_F16, WEFT_CPU);
    weft_tensor *long0 = weft_zeros(0, NULL, WEFT_I64, WEFT_CPU);
    weft_tensor *double0 = weft_zeros(0, NULL, WEFT_F64, WEFT_CPU);
    tu_assert_no_error();
    /* int32 tensor + int64 0-dim: same category, the dimensioned tensor wins. */
    cr_expect_eq(weft_result_type(ints, long0), WEFT_I32);
    /* float16 tensor + float64 0-dim: same category, stays float16. */
    cr_expect_eq(weft_result_type(halves, double0), WEFT_F16);
    /* int32 tensor + float64 0-dim: higher category, takes the 0-dim's type. */
    cr_expect_eq(weft_result_type(ints, double0), WEFT_F64);
    /* Python scalars: int stays int32, float goes to the default dtype. */
    cr_expect_eq(weft_result_type_scalar(ints, 2.0), WEFT_I32);
    cr_expect_eq(weft_result_type_scalar(ints, 2.5), WEFT_F32);
    cr_expect_eq(weft_result_type_scalar(halves, 2.5), WEFT_F16);
    weft_tensor_release(ints);
    weft_tensor_release(halves);
    weft_tensor_release(long0);
    weft_tensor_release(double0);
}

Test(dtype, float16_round_trips_and_rounds_to_nearest_even)
{
    /* Every finite half converts to float and back unchanged. */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
            continue; /* nan payloads are only kept quiet */
        float f = weft_f16_to_float((uint16_t)h);
        cr_assert_eq(weft_float_to_f16(f), h, "half 0x%04x -> %g -> 0x%04x", h, f,
                     weft_float_to_f16(f));
    }
    cr_expect_eq(weft_float_to_f16(1.0f), 0x3c00);
    cr_expect_eq(weft_float_to_f16(65504.0f), 0x7bff);
    cr_expect_eq(weft_float_to_f16(65520.0f), 0x7c00, "overflow rounds to inf");
    cr_expect_eq(weft_float_to_f16(1.0f + 1.0f / 2048.0f), 0x3c00, "tie rounds to even");
    cr_expect_eq(weft_float_to_f16(1.0f + 3.0f / 2048.0f), 0x3c02, "tie rounds to even");
    cr_expect_eq(weft_float_to_f16(5.9604644775390625e-8f), 0x0001, "smallest subnormal");
    cr_expect_eq(weft_float_to_f16(2.98e-8f), 0x0000, "below half the smallest subnormal");
    float back = weft_f16_to_float(weft_float_to_f16(NAN));
    cr_expect(back != back, "nan survives");
}

Test(dtype, bfloat16_round_trips_and_rounds_to_nearest_even)
{
    for (uint32_t b = 0; b < 0x10000u; b++) {
        if ((b & 0x7f80u) == 0x7f80u && (b & 0x7fu))
            continue;
        float f = weft_bf16_to_float((uint16_t)b);
        cr_assert_eq(weft_float_to_bf16(f), b, "bf16 0x%04x round trip", b);
    }
    cr_expect_eq(weft_float_to_bf16(1.0f), 0x3f80);
    /* 1 + 2^-8 is a tie between 0x3f80 and 0x3f81: even wins. */
    cr_expect_eq(weft_float_to_bf16(1.00390625f), 0x3f80);
    cr_expect_eq(weft_float_to_bf16(1.01171875f), 0x3f82);
    float back = weft_bf16_to_float(weft_float_to_bf16(NAN));
    cr_expect(back != back, "nan survives");
}

Test(dtype, accumulate_types)
{
    cr_expect_eq(weft_dtype_accumulate(WEFT_BOOL), WEFT_I64);
    cr_expect_eq(weft_dtype_accumulate(WEFT_U8), WEFT_I64);
    cr_expect_eq(weft_dtype_accumulate(WEFT_F16), WEFT_F32);
    cr_expect_eq(weft_dtype_accumulate(WEFT_BF16), WEFT_F32);
    cr_expect_eq(weft_dtype_accumulate(WEFT_F64), WEFT_F64);
}
