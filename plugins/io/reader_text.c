/* plugins/io/reader_text.c: the `text` reader: any file as a byte-level token stream
 * (vocabulary 256, one token per byte, no tokenizer), memory-mapped, cut into (x, y)
 * windows for a language model by token_stream.c (keys and splits there). Every file
 * is valid text at this level, so open() only maps it. */
#include "io.h"

#define TEXT_VOCAB 256

static int text_load(const char *path, int64_t vocab, struct io_tokens *out)
{
    (void)vocab;
    int rc = io_map_open(&out->map, path);
    if (rc < 0)
        return rc;
    out->data = out->map.data;
    out->width = 1;
    out->count = (int64_t)out->map.size;
    return 0;
}

static int text_open(const weft_options *o, struct weft_dataset_info *info, void **ctx)
{
    return io_token_stream_open(o, TEXT_VOCAB, text_load, info, ctx);
}

const struct weft_dataset_reader io_text_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "text", struct weft_dataset_reader),
    .description = "any file as byte-level tokens (vocabulary 256), memory-mapped: (x, y) "
                   "windows for language models",
    .open = text_open,
    .read = io_token_stream_read,
    .close = io_token_stream_close,
};
