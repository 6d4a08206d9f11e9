/* weft/checkpoint.h: named tensor collections and safetensors files.
 *
 * A checkpoint is a safetensors file: an 8-byte little-endian header length N, N bytes
 * of JSON ({"name": {"dtype": "F32", "shape": [3, 5], "data_offsets": [begin, end]}, ...}
 * plus an optional "__metadata__" map of strings) and then the raw little-endian data.
 * Files written here are byte for byte what the Python `safetensors` library writes for
 * the same tensors and metadata, so with the names PyTorch's state_dict() uses ("0.weight",
 * "fc1.bias", ...) `model.load_state_dict(safetensors.torch.load_file(path))` works, and
 * files written by PyTorch load here.
 *
 * weft_tensor_dict is an ordered name -> tensor list (a state_dict); weft_metadata an
 * ordered string -> string map for __metadata__ (training position, config, ...).
 *
 * Errors follow weft/error.h. Malformed files fail with WEFT_ERR_VALUE and a message that
 * names the file, the tensor and the position, e.g.
 *   "model.safetensors: tensor '0.weight': data_offsets [0, 48] span 48 bytes but shape
 *    [3, 5] of F32 needs 60";
 * a dtype weft has no type for (U16, U32, U64, F8_*, ...) fails with WEFT_ERR_TYPE;
 * system failures (open, read, write, rename) with WEFT_ERR_IO and the system's reason.
 */
#ifndef WEFT_CHECKPOINT_H
#define WEFT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "weft/device.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tensor dicts ------------------------------------------------------------------ */

struct weft_tensor_dict;

/* An empty dict, or NULL with WEFT_ERR_OUT_OF_MEMORY. Free with weft_tensor_dict_free. */
struct weft_tensor_dict *weft_tensor_dict_new(void);
/* Releases every tensor the dict holds and frees it; NULL is ignored. */
void weft_tensor_dict_free(struct weft_tensor_dict *d);
/* Appends (name, t), keeping a reference to t (the caller keeps its own). The name is
 * copied. Fails with WEFT_ERR_VALUE "duplicate key 'name'" when the name is present; a
 * NULL t returns negative without setting an error (a failed op upstream already did). */
int weft_tensor_dict_add(struct weft_tensor_dict *d, const char *name, weft_tensor *t);
/* Number of entries. */
size_t weft_tensor_dict_len(const struct weft_tensor_dict *d);
/* The tensor named `name` as a new reference (see weft/tensor.h), or NULL without an
 * error when there is none. */
weft_tensor *weft_tensor_dict_get(const struct weft_tensor_dict *d, const char *name);
/* Entry i (0 <= i < len) in insertion order: its name (owned by the dict, valid while
 * the dict lives) and its tensor as a new reference. NULL with WEFT_ERR_INDEX when i is
 * out of range. */
const char *weft_tensor_dict_name(const struct weft_tensor_dict *d, size_t i);
weft_tensor *weft_tensor_dict_at(const struct weft_tensor_dict *d, size_t i);

/* ---- metadata --------------------------------------------------------------------- */

struct weft_metadata;

/* An empty map, or NULL with WEFT_ERR_OUT_OF_MEMORY. */
struct weft_metadata *weft_metadata_new(void);
void weft_metadata_free(struct weft_metadata *m); /* NULL is ignored */
/* Sets key to a copy of value: replaces the value of an existing key in place, else
 * appends. Returns 0 or negative. */
int weft_metadata_set(struct weft_metadata *m, const char *key, const char *value);
/* The value of key (owned by m, valid until key is set again or m is freed), or NULL
 * without an error when absent. */
const char *weft_metadata_get(const struct weft_metadata *m, const char *key);
size_t weft_metadata_len(const struct weft_metadata *m);
/* Key and value of entry i in insertion order; NULL with WEFT_ERR_INDEX out of range. */
const char *weft_metadata_key(const struct weft_metadata *m, size_t i);
const char *weft_metadata_value(const struct weft_metadata *m, size_t i);
/* Integers stored as decimal text (safetensors metadata values are strings). */
int weft_metadata_set_int(struct weft_metadata *m, const char *key, int64_t value);
int weft_metadata_set_uint(struct weft_metadata *m, const char *key, uint64_t value);
/* Parses the value of key as a decimal integer. WEFT_ERR_VALUE when the key is absent
 * ("checkpoint metadata has no key 'epoch'") or its value is not an integer of the type's
 * range ("checkpoint metadata 'epoch' = 'three' is not an integer"). */
int weft_metadata_get_int(const struct weft_metadata *m, const char *key, int64_t *out);
int weft_metadata_get_uint(const struct weft_metadata *m, const char *key, uint64_t *out);

/* ---- safetensors files ------------------------------------------------------------ */

/* The largest header weft (like the Python library) accepts, in bytes. */
#define WEFT_SAFETENSORS_MAX_HEADER 100000000u

/* Writes every tensor of dict (any device, any strides; stored contiguous, little-endian,
 * in its own dtype) and, when metadata is not NULL, "__metadata__" to path.
 * As the Python library does, entries are ordered by dtype (largest alignment first:
 * I64, F64, F32, I32, BF16, F16, I16, I8, U8, BOOL) then by name, data follows in that
 * order, and the header JSON is compact and padded with spaces to a multiple of 8 bytes;
 * metadata keys keep their insertion order. Loading gives back the same names, shapes,
 * dtypes and values, contiguous, without autograd history.
 *
 * The write is atomic: the file is written as "<path>.tmp.<pid>" in the same directory,
 * flushed and fsync'd, then renamed over path and the directory fsync'd. On any failure
 * before the rename the temporary file is removed and an existing file at path is left
 * untouched, so an interrupted save never destroys the previous checkpoint (a crash can
 * leave a stale temporary file behind). A failed fsync of the directory after the rename
 * is reported, but the new file is then already in place.
 *
 * Errors: WEFT_ERR_VALUE for a tensor that is not strided ("tensor 'x' has a sparse
 * layout ..."), the name "__metadata__", or names and metadata that are not valid
 * UTF-8; WEFT_ERR_IO naming the file and the system's reason; whatever reading a
 * tensor's values from its device sets. Returns 0 or negative. */
int weft_safetensors_save(const char *path, const struct weft_tensor_dict *dict,
                          const struct weft_metadata *metadata);

/* Reads path, validating all of it before allocating any tensor: the header length
 * (at most WEFT_SAFETENSORS_MAX_HEADER and within the file), the header (UTF-8, strict
 * JSON, an object, no duplicate keys, every entry exactly {dtype, shape, data_offsets}
 * with a known dtype and non-negative integers, "__metadata__" an object of strings),
 * the offsets (sorted, they tile the data from 0 with no hole or overlap, each spans
 * numel x itemsize bytes) and the file length (8 + N + the last offset).
 * On success *dict (when dict is not NULL) receives a new dict holding every tensor in
 * header order, each a new contiguous tensor on `device`; *metadata (when not NULL) a new
 * map with "__metadata__" (empty when the file has none). Pass dict NULL to read only the
 * metadata (everything is still validated). On failure both are set to NULL.
 * Errors: WEFT_ERR_IO when the file cannot be opened or read; WEFT_ERR_VALUE for a
 * malformed file; WEFT_ERR_TYPE for a dtype weft has no type for, naming the tensor and
 * the dtype. Returns 0 or negative. */
int weft_safetensors_load(const char *path, weft_device device, struct weft_tensor_dict **dict,
                          struct weft_metadata **metadata);

/* The safetensors name of a dtype ("F32", "BOOL", ...); "invalid" for an invalid dtype. */
const char *weft_safetensors_dtype_name(enum weft_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
