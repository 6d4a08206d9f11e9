/* protobuf/pb.c: the encoder of pb.h. */
#include "pb.h"

#include <stdlib.h>
#include <string.h>

void pb_free(struct pb *m)
{
    free(m->buf);
    free(m->refs);
    *m = (struct pb)PB_INIT;
}

bool pb_failed(const struct pb *m)
{
    return m->failed;
}

/* Room for n more bytes; false (and the message failed) when there is none. */
static bool reserve(struct pb *m, size_t n)
{
    if (m->failed)
        return false;
    if (n <= m->cap - m->len)
        return true;
    size_t cap = m->cap ? m->cap : 64;
    while (cap - m->len < n) {
        if (cap > SIZE_MAX / 2) {
            m->failed = true;
            return false;
        }
        cap *= 2;
    }
    unsigned char *buf = realloc(m->buf, cap);
    if (!buf) {
        m->failed = true;
        return false;
    }
    m->buf = buf;
    m->cap = cap;
    return true;
}

void pb_raw(struct pb *m, const void *p, size_t n)
{
    if (n == 0 || !reserve(m, n))
        return;
    memcpy(m->buf + m->len, p, n);
    m->len += n;
    m->size += n;
}

void pb_varint(struct pb *m, uint64_t v)
{
    unsigned char b[10];
    size_t n = 0;
    do {
        b[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v)
            b[n] |= 0x80;
        n++;
    } while (v);
    pb_raw(m, b, n);
}

void pb_key(struct pb *m, unsigned field, unsigned wire)
{
    pb_varint(m, (uint64_t)field << 3 | wire);
}

static void little_endian(struct pb *m, uint64_t v, int nbytes)
{
    unsigned char b[8];
    for (int i = 0; i < nbytes; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    pb_raw(m, b, (size_t)nbytes);
}

void pb_int(struct pb *m, unsigned field, int64_t v)
{
    pb_key(m, field, PB_VARINT);
    pb_varint(m, (uint64_t)v);
}

void pb_float(struct pb *m, unsigned field, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    pb_key(m, field, PB_FIXED32);
    little_endian(m, u, 4);
}

void pb_double(struct pb *m, unsigned field, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    pb_key(m, field, PB_FIXED64);
    little_endian(m, u, 8);
}

void pb_bytes(struct pb *m, unsigned field, const void *p, size_t n)
{
    pb_key(m, field, PB_LEN);
    pb_varint(m, n);
    pb_raw(m, p, n);
}

void pb_string(struct pb *m, unsigned field, const char *s)
{
    pb_bytes(m, field, s, strlen(s));
}

static void add_ref(struct pb *m, size_t at, const void *data, uint64_t len)
{
    if (m->failed || len == 0)
        return;
    if (m->nrefs == m->cap_refs) {
        size_t cap = m->cap_refs ? 2 * m->cap_refs : 8;
        struct pb_ref *refs = realloc(m->refs, cap * sizeof *refs);
        if (!refs) {
            m->failed = true;
            return;
        }
        m->refs = refs;
        m->cap_refs = cap;
    }
    m->refs[m->nrefs++] = (struct pb_ref){at, data, len};
    m->size += len;
}

void pb_bytes_ref(struct pb *m, unsigned field, const void *p, uint64_t n)
{
    pb_key(m, field, PB_LEN);
    pb_varint(m, n);
    add_ref(m, m->len, p, n);
}

void pb_message(struct pb *m, unsigned field, const struct pb *child)
{
    if (child->failed)
        m->failed = true;
    pb_key(m, field, PB_LEN);
    pb_varint(m, child->size);
    size_t base = m->len;
    pb_raw(m, child->buf, child->len);
    for (size_t i = 0; i < child->nrefs; i++)
        add_ref(m, base + child->refs[i].at, child->refs[i].data, child->refs[i].len);
}

int pb_write(const struct pb *m, FILE *f)
{
    if (m->failed)
        return -1;
    size_t done = 0;
    for (size_t i = 0; i <= m->nrefs; i++) {
        size_t upto = i < m->nrefs ? m->refs[i].at : m->len;
        if (upto > done && fwrite(m->buf + done, 1, upto - done, f) != upto - done)
            return -1;
        done = upto;
        if (i == m->nrefs)
            break;
        /* fwrite's size_t count: a reference above SIZE_MAX cannot exist on this host */
        if (fwrite(m->refs[i].data, 1, (size_t)m->refs[i].len, f) != (size_t)m->refs[i].len)
            return -1;
    }
    return 0;
}
