/* weft/state_dict.h: named tensors and string metadata (the nn library).
 *
 * weft_tensor_dict is an ordered name -> tensor list: what weft_module_state_dict()
 * returns and a checkpoint holds. weft_metadata is an ordered string -> string map: a
 * checkpoint's __metadata__ (training position, config, optimizer hyperparameters).
 * Both keep insertion order and find names through a hash index.
 *
 * Errors follow weft/error.h.
 */
#ifndef WEFT_STATE_DICT_H
#define WEFT_STATE_DICT_H

#include <stddef.h>
#include <stdint.h>

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

#ifdef __cplusplus
}
#endif
#endif
