/* core/dtype.c: the dtype table and PyTorch's promotion lattice. */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "weft/dtype.h"

struct dtype_info {
    const char *name;
    const char *torch_name;
    const char *aliases[3];
    size_t size;
};

static const struct dtype_info dtype_table[WEFT_DTYPE_COUNT] = {
    [WEFT_BOOL] = {"bool", "Bool", {"b8"}, 1},
    [WEFT_U8] = {"uint8", "Byte", {"u8"}, 1},
    [WEFT_I8] = {"int8", "Char", {"i8"}, 1},
    [WEFT_I16] = {"int16", "Short", {"i16", "short"}, 2},
    [WEFT_I32] = {"int32", "Int", {"i32", "int"}, 4},
    [WEFT_I64] = {"int64", "Long", {"i64", "long"}, 8},
    [WEFT_F16] = {"float16", "Half", {"f16", "half"}, 2},
    [WEFT_BF16] = {"bfloat16", "BFloat16", {"bf16"}, 2},
    [WEFT_F32] = {"float32", "Float", {"f32", "float"}, 4},
    [WEFT_F64] = {"float64", "Double", {"f64", "double"}, 8},
};

bool weft_dtype_valid(int dt)
{
    return dt >= 0 && dt < WEFT_DTYPE_COUNT;
}

size_t weft_dtype_size(enum weft_dtype dt)
{
    return weft_dtype_valid(dt) ? dtype_table[dt].size : 0;
}

const char *weft_dtype_name(enum weft_dtype dt)
{
    return weft_dtype_valid(dt) ? dtype_table[dt].name : "invalid";
}

const char *weft_dtype_torch_name(enum weft_dtype dt)
{
    return weft_dtype_valid(dt) ? dtype_table[dt].torch_name : "Invalid";
}

int weft_dtype_parse(const char *name, enum weft_dtype *out)
{
    if (!name)
        return -1;
    if (strncmp(name, "torch.", 6) == 0)
        name += 6;
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
        const struct dtype_info *info = &dtype_table[dt];
        bool match = strcasecmp(name, info->name) == 0;
        for (int a = 0; a < 3 && !match && info->aliases[a]; a++)
            match = strcasecmp(name, info->aliases[a]) == 0;
        if (match) {
            *out = (enum weft_dtype)dt;
            return 0;
        }
    }
    return -1;
}

bool weft_dtype_is_floating(enum weft_dtype dt)
{
    return weft_dtype_valid(dt) && (WEFT_DTYPES_FLOATING & WEFT_DTYPE_BIT(dt));
}

bool weft_dtype_is_integral(enum weft_dtype dt)
{
    return weft_dtype_valid(dt) && (WEFT_DTYPES_INTEGRAL & WEFT_DTYPE_BIT(dt));
}

bool weft_dtype_is_signed(enum weft_dtype dt)
{
    return dt != WEFT_BOOL && dt != WEFT_U8 && weft_dtype_valid(dt);
}

int weft_dtype_category(enum weft_dtype dt)
{
    if (dt == WEFT_BOOL)
        return 0;
    return weft_dtype_is_floating(dt) ? 2 : 1;
}

/* torch's promoteTypes table restricted to our dtypes (c10/core/ScalarType.cpp). */
enum weft_dtype weft_promote_types(enum weft_dtype a, enum weft_dtype b)
{
    if (a == b)
        return a;
    if (a == WEFT_BOOL)
        return b;
    if (b == WEFT_BOOL)
        return a;
    bool fa = weft_dtype_is_floating(a), fb = weft_dtype_is_floating(b);
    if (fa != fb)
        return fa ? a : b;
    if (fa) {
        if ((a == WEFT_F16 && b == WEFT_BF16) || (a == WEFT_BF16 && b == WEFT_F16))
            return WEFT_F32;
        return dtype_table[a].size >= dtype_table[b].size ? a : b;
    }
    /* Both integral. uint8 with a signed type needs the next signed size up. */
    if (a == WEFT_U8 || b == WEFT_U8) {
        enum weft_dtype other = a == WEFT_U8 ? b : a;
        return other == WEFT_I8 ? WEFT_I16 : other;
    }
    return dtype_table[a].size >= dtype_table[b].size ? a : b;
}

enum weft_dtype weft_dtype_accumulate(enum weft_dtype dt)
{
    if (dt == WEFT_BOOL || weft_dtype_is_integral(dt))
        return WEFT_I64;
    if (dt == WEFT_F16 || dt == WEFT_BF16)
        return WEFT_F32;
    return dt;
}

enum weft_dtype weft_default_dtype(void)
{
    return WEFT_F32;
}

const char *weft_dtype_meta_name(enum weft_dtype dt)
{
    /* Where PyTorch prints caffe2::TypeMeta's C++ name ("c10::Half", "long int"), weft
     * keeps the sentence and prints its own dtype name: the C++ types are PyTorch's
     * internals, which a weft user never meets. */
    return weft_dtype_name(dt);
}
