/* weft/checkpoint.h: safetensors files (the train library).
 *
 * A checkpoint is a safetensors file: an 8-byte little-endian header length N, N bytes
 * of JSON ({"name": {"dtype": "F32", "shape": [3, 5], "data_offsets": [begin, end]}, ...}
 * plus an optional "__metadata__" map of strings) and then the raw little-endian data.
 * Files written here are byte for byte what the Python `safetensors` library writes for
 * the same tensors and metadata, so with the names PyTorch's state_dict() uses ("0.weight",
 * "fc1.bias", ...) `model.load_state_dict(safetensors.torch.load_file(path))` works, and
 * files written by PyTorch load here.
 *
 * The tensors of a file are a weft_tensor_dict, its __metadata__ a weft_metadata map
 * (weft/state_dict.h).
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
#include "weft/state_dict.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* ---- fault injection for tests ------------------------------------------------------ */

/* A point where a test may kill the process (SIGKILL, nothing flushed) to check that the
 * files on disk survive it: it calls the hook a test program installed, and does
 * nothing in any other. tests/crashpoint.c is that hook, linked only into test programs
 * (tests/weft-train-crashpoints): there the environment variable WEFT_TEST_CRASH_AT
 * picks the point: "NAME" (its first arrival), "NAME:K" (its K-th arrival) or "N" (the
 * N-th arrival at any point). weft_safetensors_save() passes "safetensors.partial"
 * (header written, data not), "safetensors.written" (the temporary file complete and
 * fsync'd, not renamed) and "safetensors.renamed" (the new file in place); callers may
 * add their own names. */
void weft_test_crash_point(const char *name);
/* Installs the hook weft_test_crash_point() calls (NULL: none, the default). */
void weft_test_set_crash_hook(void (*hook)(const char *name));

#ifdef __cplusplus
}
#endif
#endif
