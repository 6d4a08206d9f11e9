/* weft/dataset.h: datasets read from files, and the registry of dataset readers.
 *
 * A dataset is a fixed number of samples (its length). Every sample has the same named
 * fields, each with a fixed sample shape and dtype: MNIST has "image" [1, 28, 28] uint8
 * and "label" [] int64. weft_dataset_read() copies the fields of a batch of samples,
 * chosen by index, into contiguous host buffers, one buffer per field; the data loader
 * turns those buffers into tensors.
 *
 * Readers. A reader knows one file format ("idx", "csv", "npy", "synthetic"): a vtable of
 * kind WEFT_KIND_READER (weft/registry.h) that a plugin registers from its init();
 * weft-io.so provides the built-in ones and says so in its manifest, so naming a reader
 * loads it. A config section selects one with `reader = NAME` and holds that reader's
 * keys, which the reader gets as options (weft/options.h):
 *
 *     [data.train]
 *     reader = idx
 *     images = ../data/mnist/train-images-idx3-ubyte.gz
 *     labels = ../data/mnist/train-labels-idx1-ubyte.gz
 *
 * Versioning: the reader vtable is checked like every vtable; fields are only appended and
 * a NULL optional method means "not provided". struct weft_dataset_field and struct
 * weft_dataset_info are filled by readers and are fixed for an ABI: changing them
 * changes WEFT_ABI_VERSION.
 *
 * Threading: the registry may be used from any thread. weft_dataset_read() may run on
 * several threads at once for the same dataset (the loader's workers do exactly that),
 * each filling its own buffers; open and close must not overlap any other call on the
 * same dataset.
 *
 * Errors: every function that fails returns NULL or a negative status with the thread's
 * error set (weft/error.h). Errors about files name the file and the byte offset (binary
 * formats) or line and column (text formats), what was found and what was expected.
 */
#ifndef WEFT_DATASET_H
#define WEFT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "weft/dtype.h"
#include "weft/options.h"
#include "weft/registry.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kind's name ("reader") as a symbol of libweft-train: a vtable that names its kind
 * links the library that defines it, which registers the kind when it loads, before the
 * plugin's init() can register a reader. */
extern const char weft_kind_reader[];
#define WEFT_KIND_READER weft_kind_reader

#define WEFT_DATASET_MAX_FIELDS 8 /* fields per sample */
#define WEFT_DATASET_NAME_MAX 32  /* bytes in a field name, with the terminating NUL */

/* One field of every sample. */
struct weft_dataset_field {
    char name[WEFT_DATASET_NAME_MAX]; /* "image", "label", "features"; unique, not empty */
    enum weft_dtype dtype;            /* element type in the buffers read() fills */
    int32_t ndim;                     /* sample rank, 0..WEFT_MAX_DIMS-1 (a batch adds one) */
    int64_t shape[WEFT_MAX_DIMS];     /* sample shape; sizes >= 0; entries past ndim are 0 */
    int64_t num_classes;              /* class labels lie in [0, num_classes); 0 if not labels */
};

/* What a reader's open() describes: the number of samples and their fields. */
struct weft_dataset_info {
    int64_t length;  /* number of samples, >= 0 */
    int32_t nfields; /* 1..WEFT_DATASET_MAX_FIELDS */
    struct weft_dataset_field fields[WEFT_DATASET_MAX_FIELDS];
};

/* A dataset reader: the vtable a plugin registers. Its methods get back the `ctx` that
 * open() made; the library never looks inside it. */
struct weft_dataset_reader {
    struct weft_vtable base; /* kind WEFT_KIND_READER; name: the value of `reader =` ("idx") */
    const char *description; /* one line, e.g. "MNIST IDX files, raw or gzip'd"; optional */

    /* Required. Opens the dataset the options describe (the keys of its config section:
     * read them with the weft_options getters, so the unknown-key check can report the
     * others, and relative paths with weft_options_path()), validates the whole input,
     * and fills *info (zeroed by the library) and *ctx. Must bound every allocation by
     * what the input really holds (never by a size a file merely claims). Returns 0, or
     * negative with an error set and nothing left allocated. */
    int (*open)(const weft_options *options, struct weft_dataset_info *info, void **ctx);
    /* Required. Copies samples indices[0..n) into field_buffers: for every field f,
     * field_buffers[f] receives n samples back to back, sample k at byte
     * k * weft_dataset_sample_bytes(ds, f), in native byte order and C order. The library
     * has checked n >= 1, every index in [0, length) and every buffer non-NULL. Called
     * from several threads at once on the same ctx with disjoint buffers: it must not
     * change shared state without a lock. Returns 0 or negative with an error set. */
    int (*read)(void *ctx, int64_t n, const int64_t *indices, void *const *field_buffers);
    /* Optional. Frees ctx (called once, by weft_dataset_close or when open's result is
     * refused by the library). */
    void (*close)(void *ctx);
};

typedef struct weft_dataset weft_dataset;

/* ---- datasets ------------------------------------------------------------------- */

/* Opens the dataset the options describe: reads `reader` (required), finds the reader
 * (loading the plugin that provides it) and calls its open(). Errors: WEFT_ERR_CONFIG for
 * a missing or unknown reader, naming the origin, the section, the registered readers
 * and the closest name; the reader's own errors otherwise. The caller owns the result
 * and ends it with weft_dataset_close(). */
weft_dataset *weft_dataset_open(const weft_options *options);
/* Frees the dataset (NULL is a no-op). Not while a read on it is running. */
void weft_dataset_close(weft_dataset *ds);
/* A dataset of base's samples indices[0..n) (copied), e.g. a validation split. Reads go
 * to base, which must stay open while the subset lives. Close it like any dataset. */
weft_dataset *weft_dataset_subset(const weft_dataset *base, int64_t n, const int64_t *indices);

/* Number of samples; -1 for NULL. */
int64_t weft_dataset_length(const weft_dataset *ds);
/* Number of fields per sample; 0 for NULL. */
int weft_dataset_num_fields(const weft_dataset *ds);
/* Field i (0..num_fields-1), valid while ds lives; NULL when out of range. */
const struct weft_dataset_field *weft_dataset_field(const weft_dataset *ds, int i);
/* Index of the field called name, or -1 (no error set). */
int weft_dataset_field_index(const weft_dataset *ds, const char *name);
/* Elements and bytes of one sample of field i (its buffer holds n times that); 0 when
 * i is out of range. */
int64_t weft_dataset_sample_numel(const weft_dataset *ds, int i);
size_t weft_dataset_sample_bytes(const weft_dataset *ds, int i);
/* The reader's name ("idx") and the config section the dataset came from; "" for NULL. */
const char *weft_dataset_reader_name(const weft_dataset *ds);
const char *weft_dataset_section(const weft_dataset *ds);

/* Fills field_buffers[0..num_fields) with samples indices[0..n), as the reader's read()
 * describes: buffer f must hold n * weft_dataset_sample_bytes(ds, f) bytes. n == 0
 * does nothing. Errors: n < 0 or a NULL indices/buffer (WEFT_ERR_VALUE), an index
 * outside [0, length) (WEFT_ERR_INDEX: "index 8000 is out of bounds for dataset
 * [data.train] with 8000 samples"), or the reader's error. Thread-safe as said above;
 * on failure the buffers' contents are unspecified. */
int weft_dataset_read(const weft_dataset *ds, int64_t n, const int64_t *indices,
                      void *const *field_buffers);

#ifdef __cplusplus
}
#endif
#endif
