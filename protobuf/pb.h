/* protobuf/pb.h: the protobuf wire format, encode side, for the few messages weft writes
 * itself (ONNX models in nn/, TensorBoard events in train/), so no protobuf library and
 * no generated code is needed. Not installed and not ABI: a static library linked into
 * each library that writes protobuf, its symbols hidden there.
 *
 * A message is built field by field into a growable buffer. Large byte fields (a
 * model's weights) can be referenced instead of copied: the message then keeps the
 * pointer, and the bytes are read only when the message is written, so a 2 GiB tensor is
 * never copied. A nested message is appended by copying its own bytes and keeping its
 * references, so only the small parts of a message tree are ever copied.
 *
 * Errors are sticky: an allocation failure marks the message failed, later calls do
 * nothing, and pb_failed() says so; check once at the end. */
#ifndef WEFT_PB_H
#define WEFT_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Wire types. */
enum { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };

/* Bytes of the message held by pointer: they go in at offset `at` of buf. */
struct pb_ref {
    size_t at;
    const void *data;
    uint64_t len;
};

struct pb {
    unsigned char *buf;
    size_t len, cap;
    struct pb_ref *refs;
    size_t nrefs, cap_refs;
    uint64_t size; /* the encoded size: len plus every reference's length */
    bool failed;
};

/* An empty message: `struct pb m = PB_INIT;` (or zeroed memory). */
#define PB_INIT {0}

void pb_free(struct pb *m);
bool pb_failed(const struct pb *m);

/* Raw pieces. */
void pb_raw(struct pb *m, const void *p, size_t n);
void pb_varint(struct pb *m, uint64_t v);
void pb_key(struct pb *m, unsigned field, unsigned wire);

/* Fields. Signed integers are written as protobuf's int32/int64 (two's complement in ten
 * bytes when negative), not zigzag. */
void pb_int(struct pb *m, unsigned field, int64_t v);
void pb_float(struct pb *m, unsigned field, float v);
void pb_double(struct pb *m, unsigned field, double v);
void pb_bytes(struct pb *m, unsigned field, const void *p, size_t n); /* copied */
void pb_string(struct pb *m, unsigned field, const char *s);          /* copied */
/* A bytes field whose content stays at p until the message is written (borrowed). */
void pb_bytes_ref(struct pb *m, unsigned field, const void *p, uint64_t n);
/* A nested message: its bytes copied, its references kept (they stay borrowed). */
void pb_message(struct pb *m, unsigned field, const struct pb *child);

/* Writes the whole message (buf and referenced bytes in order) to f. 0, or -1 when the
 * message failed or a write did (errno from stdio). */
int pb_write(const struct pb *m, FILE *f);

#endif
