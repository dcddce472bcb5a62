/* tb_events.h: TensorBoard event files (log.tensorboard), written without TensorFlow.
 *
 * An event file is a sequence of TFRecord records, each
 *   uint64 length | uint32 masked CRC32C of the 8 length bytes |
 *   length bytes of data | uint32 masked CRC32C of the data
 * (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), whose data is an
 * Event protobuf. Of TensorBoard's event.proto and summary.proto only this is written:
 *   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
 *                Summary summary = 5; SessionLog session_log = 7; }
 *   Summary    { repeated Value value = 1; }
 *   Value      { string tag = 1; float simple_value = 2; }
 *   SessionLog { SessionStatus status = 1; }   (START = 1)
 * A file opens with {wall_time, file_version "brain.Event:2"}; each step is one
 * Event whose Summary holds that step's finite values (a value that is NaN, a
 * metric not computed, has no point, as it has no field in `inspect --csv`). */
#ifndef DLLM_TB_EVENTS_H
#define DLLM_TB_EVENTS_H

#include "kernels/base.h"

#include <stddef.h>
#include <stdint.h>

/* CRC32C (Castagnoli) of n bytes, and the masked form TFRecord stores. */
uint32_t tb_crc32c(const void *data, size_t n);
uint32_t tb_masked_crc32c(const void *data, size_t n);

/* A growing byte string the encoders append to. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} tb_buf;
void tb_buf_free(tb_buf *b);

/* Event encoders (append one Event's bytes to b). */
void tb_event_file_version(tb_buf *b, double wall_time);
/* SessionLog START at step: TensorBoard drops every value it has read at this step
 * or later (the values a resumed run writes again). */
void tb_event_start(tb_buf *b, double wall_time, int64_t step);
/* The finite values[i] as scalars tagged prefix + names[i] (n of them); non-finite
 * values are left out. */
void tb_event_scalars(tb_buf *b, double wall_time, int64_t step, const char *prefix, int n,
                      const char *const *names, const double *values);
/* Appends data (n bytes) to out framed as one TFRecord record. */
void tb_record(tb_buf *out, const uint8_t *data, size_t n);

typedef struct tb_writer tb_writer;

/* Creates DIR/events.out.tfevents.T.HOST.PID and writes its file_version record. T is
 * the time in seconds, raised above the T of any event file already in DIR: readers
 * take a run's files in name order, and this one must come last. restart_step >= 0
 * (a resumed run's first step) adds a SessionLog START at that step, so the values an
 * earlier file holds from there on are replaced by this file's; earlier files are left
 * as they are. Input error naming the path when it cannot be written. */
int tb_writer_open(tb_writer **out, const char *dir, int64_t restart_step, dllm_err *err);
/* One step's values (tb_event_scalars) as one record, flushed to the file. */
int tb_write_scalars(tb_writer *w, int64_t step, const char *prefix, int n,
                     const char *const *names, const double *values, dllm_err *err);
const char *tb_writer_path(const tb_writer *w);
/* Closes and frees; NULL is fine. Nonzero when the close failed. */
int tb_writer_close(tb_writer *w);

#endif
