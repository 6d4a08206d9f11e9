/* weft/dtype.h: element types, their sizes, names and PyTorch's promotion rules. */
#ifndef WEFT_DTYPE_H
#define WEFT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values are part of the ABI: append only. */
enum weft_dtype {
    WEFT_BOOL = 0,
    WEFT_U8 = 1,
    WEFT_I8 = 2,
    WEFT_I16 = 3,
    WEFT_I32 = 4,
    WEFT_I64 = 5,
    WEFT_F16 = 6,
    WEFT_BF16 = 7,
    WEFT_F32 = 8,
    WEFT_F64 = 9,
    WEFT_DTYPE_COUNT
};

#define WEFT_DTYPE_BIT(dt) (1u << (dt))
#define WEFT_DTYPES_FLOATING                                                                  \
    (WEFT_DTYPE_BIT(WEFT_F16) | WEFT_DTYPE_BIT(WEFT_BF16) | WEFT_DTYPE_BIT(WEFT_F32) |        \
     WEFT_DTYPE_BIT(WEFT_F64))
#define WEFT_DTYPES_INTEGRAL                                                                  \
    (WEFT_DTYPE_BIT(WEFT_U8) | WEFT_DTYPE_BIT(WEFT_I8) | WEFT_DTYPE_BIT(WEFT_I16) |           \
     WEFT_DTYPE_BIT(WEFT_I32) | WEFT_DTYPE_BIT(WEFT_I64))
#define WEFT_DTYPES_ALL ((1u << WEFT_DTYPE_COUNT) - 1u)

/* Bytes per element; 0 for an invalid dtype. */
size_t weft_dtype_size(enum weft_dtype dt);
/* weft name ("float32", "int64", "bool", ...); "invalid" for an invalid dtype. */
const char *weft_dtype_name(enum weft_dtype dt);
/* PyTorch's capitalised scalar type name used in error texts ("Float", "Long", "Bool"). */
const char *weft_dtype_torch_name(enum weft_dtype dt);
/* The name for the messages where PyTorch prints caffe2::TypeMeta's C++ name ("float",
 * "long int", "c10::Half"): weft keeps PyTorch's sentence but prints its own dtype name
 * ("float32", "int64", "float16"), the same as weft_dtype_name. */
const char *weft_dtype_meta_name(enum weft_dtype dt);
/* Parses "float32"/"f32"/"float" etc.; returns 0 and sets *out, or -1 (no error set). */
int weft_dtype_parse(const char *name, enum weft_dtype *out);
bool weft_dtype_valid(int dt);
bool weft_dtype_is_floating(enum weft_dtype dt);
bool weft_dtype_is_integral(enum weft_dtype dt); /* bool excluded */
bool weft_dtype_is_signed(enum weft_dtype dt);

/* Default floating dtype (float32), as torch.get_default_dtype(). */
enum weft_dtype weft_default_dtype(void);

#ifdef __cplusplus
}
#endif
#endif
