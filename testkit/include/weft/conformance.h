/* weft/conformance.h: every op the core can drive, on every dtype a backend registers,
 * checked against the cpu (or, on the cpu itself, against a plain double reference).
 *
 * Each (op, dtype) runs on random shapes: contiguous, transposed, broadcast (stride 0)
 * and zero-size. Ops with an in-place front end also run on a narrowed view of a larger
 * tensor filled with a sentinel; a kernel that writes outside its view is a failure. */
#ifndef WEFT_CONFORMANCE_H
#define WEFT_CONFORMANCE_H

#include <stdint.h>
#include <stdio.h>

#include "weft/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

enum weft_conformance_status {
    WEFT_CONFORMANCE_PASSED = 0,
    WEFT_CONFORMANCE_FAILED = 1,
    WEFT_CONFORMANCE_SKIPPED = 2, /* no kernel or no driver: not a failure */
};

/* How large the inputs are. SMALL reaches every op and dtype quickly but only a
 * device's simplest paths (one thread per output). LARGE also draws the generic shapes up
 * to 40 x 300 and adds the shapes a GPU handles differently: reductions (sum, mean, var,
 * max with indices, argmax, all) over (outputs, length) = (1, 1e6), (3, 5000),
 * (7, 70000), (300, 100), (1e5, 17), contiguous and transposed; softmax and log_softmax
 * over rows of 33, 300 and 5000 on dim 0 and -1; scatter_add with many duplicate
 * indices; im2col, col2im and the pools forward and backward with stride, padding and
 * dilation (through weft_dispatch). Each (op, dtype) of these gets an entry of its own,
 * after the generic ones; a failure's message names the case. Seconds on a cpu. */
enum weft_conformance_size {
    WEFT_CONFORMANCE_SMALL = 0,
    WEFT_CONFORMANCE_LARGE = 1,
};

struct weft_conformance_options {
    uint64_t seed;  /* 0: a fixed default */
    int rounds;     /* random shapes per layout variant; 0: 2 */
    FILE *verbose;  /* a line per failure as it happens; NULL: quiet */
    enum weft_conformance_size size; /* appended; 0: SMALL */
};

struct weft_conformance_result {
    int op;
    enum weft_dtype dtype;
    enum weft_conformance_status status;  /* ops without a driver: one SKIPPED entry,
                                             dtype the lowest registered */
    double max_error;        /* normalised: |got - want| / max(1, |want|) */
    double tolerance;
    int64_t cases;           /* shapes run */
    int64_t nan_mismatches;  /* NaN/Inf where the reference has none, or the reverse */
    int64_t sentinel_errors; /* elements outside an in-place view that changed */
    char message[160];       /* why it failed or was skipped */
};

struct weft_conformance_report {
    int device_type;
    int passed, failed, skipped;
    int count;
    int capacity;  /* entries allocated */
    struct weft_conformance_result *results; /* count entries; free with _report_free */
};

/* Runs the suite on device type device_type (index 0); o may be NULL. Returns 0 when
 * every result passed or was skipped, 1 when some failed, negative (error set) when
 * the suite could not run at all (no such backend). Free r with the function below. */
int weft_conformance_run(int device_type, const struct weft_conformance_options *o,
                         struct weft_conformance_report *r);
void weft_conformance_report_free(struct weft_conformance_report *r);
/* "small" or "large" as a size; else -1 with a ValueError naming the text. */
int weft_conformance_size_parse(const char *text, enum weft_conformance_size *out);
/* The result for (op, dtype), or NULL when the suite did not list it. */
const struct weft_conformance_result *
weft_conformance_find(const struct weft_conformance_report *r, int op, enum weft_dtype dtype);
/* A table of failures and a one-line total. */
void weft_conformance_print(const struct weft_conformance_report *r, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
