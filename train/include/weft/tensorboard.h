/* weft/tensorboard.h: scalars as TensorBoard event files, as
 * torch.utils.tensorboard.SummaryWriter writes them, without a protobuf dependency.
 *
 * The file is logdir/events.out.tfevents.<unix seconds>.<hostname>[.<n>], a TFRecord
 * stream: each record is its length (uint64 little-endian), the masked CRC32C of those 8
 * bytes, the data, and the masked CRC32C of the data. Each record's data is an Event
 * protobuf (tensorflow/core/util/event.proto): wall_time (1, double), step (2, int64),
 * then either file_version (3, "brain.Event:2", the first record) or summary (5): a
 * Summary whose Value (1) has tag (1) and simple_value (2, float). Records are buffered
 * by stdio; weft_summary_writer_flush() makes them visible to a running TensorBoard. */
#ifndef WEFT_TENSORBOARD_H
#define WEFT_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_summary_writer weft_summary_writer;

/* Creates logdir (and its parents) when missing and opens a new event file there,
 * writing the file_version event. NULL with a WEFT_ERR_IO error naming the path. */
weft_summary_writer *weft_summary_writer_open(const char *logdir);
/* SummaryWriter.add_scalar(tag, value, global_step): one Event with the current wall
 * time. Stored as float32, as TensorBoard's simple_value. 0, or negative (WEFT_ERR_IO). */
int weft_summary_writer_add_scalar(weft_summary_writer *w, const char *tag, double value,
                                   int64_t step);
/* Writes what is buffered to the file. 0, or negative (WEFT_ERR_IO). */
int weft_summary_writer_flush(weft_summary_writer *w);
/* The event file's path (owned by the writer). */
const char *weft_summary_writer_path(const weft_summary_writer *w);
/* Flushes and closes; 0, or negative when the last writes failed. NULL is ignored. */
int weft_summary_writer_close(weft_summary_writer *w);

/* The masked CRC32C TFRecord stores: ((crc >> 15) | (crc << 17)) + 0xa282ead8, with
 * crc the CRC-32C (Castagnoli) of data[0..n). */
uint32_t weft_tfrecord_masked_crc32c(const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
