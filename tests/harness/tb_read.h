/* tb_read.h: reading a TensorBoard event file back in a suite: every record's framing
 * and both CRCs checked, each Event decoded field by field from the protobuf wire
 * format (unknown fields skipped by their wire type, as a protobuf reader does). The
 * test fails on anything malformed. */
#ifndef DLLM_TB_READ_H
#define DLLM_TB_READ_H

#include "src/log/tb_events.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char tag[128];
    float value;
} tu_tb_value;

typedef struct {
    double wall_time;
    int64_t step;
    char file_version[32];
    int session_status;   /* SessionLog.status; 0 when absent */
    int has_summary;
    int n;                /* values of the summary */
    tu_tb_value v[64];
} tu_tb_event;

typedef struct {
    const uint8_t *p, *end;
} tu_pb;

static inline uint64_t tu_pb_varint(tu_pb *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        ck_assert_msg(r->p < r->end, "varint runs past its message");
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            return v;
    }
    ck_abort_msg("varint longer than 10 bytes");
    return 0;
}

static inline uint64_t tu_pb_le(tu_pb *r, int bytes)
{
    ck_assert_msg(r->end - r->p >= bytes, "fixed field runs past its message");
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    return v;
}

/* A length-delimited field's bytes as a sub-reader. */
static inline tu_pb tu_pb_sub(tu_pb *r)
{
    uint64_t n = tu_pb_varint(r);
    ck_assert_msg((uint64_t)(r->end - r->p) >= n, "field of %llu bytes runs past its message",
                  (unsigned long long)n);
    tu_pb s = {r->p, r->p + n};
    r->p += n;
    return s;
}

static inline void tu_pb_skip(tu_pb *r, int wire)
{
    switch (wire) {
    case 0: tu_pb_varint(r); break;
    case 1: tu_pb_le(r, 8); break;
    case 2: tu_pb_sub(r); break;
    case 5: tu_pb_le(r, 4); break;
    default: ck_abort_msg("wire type %d", wire);
    }
}

static inline void tu_tb_decode_value(tu_pb r, tu_tb_value *v)
{
    memset(v, 0, sizeof *v);
    int seen = 0;
    while (r.p < r.end) {
        uint64_t key = tu_pb_varint(&r);
        if (key == (1 << 3 | 2)) {
            tu_pb s = tu_pb_sub(&r);
            size_t n = (size_t)(s.end - s.p);
            ck_assert_msg(n < sizeof v->tag, "tag of %zu bytes", n);
            memcpy(v->tag, s.p, n);
        } else if (key == (2 << 3 | 5)) {
            uint32_t u = (uint32_t)tu_pb_le(&r, 4);
            memcpy(&v->value, &u, sizeof u);
            seen = 1;
        } else {
            tu_pb_skip(&r, (int)(key & 7));
        }
    }
    ck_assert_msg(seen, "value %s has no simple_value", v->tag);
}

static inline void tu_tb_decode_event(tu_pb r, tu_tb_event *e)
{
    memset(e, 0, sizeof *e);
    while (r.p < r.end) {
        uint64_t key = tu_pb_varint(&r);
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (field == 1 && wire == 1) {
            uint64_t u = tu_pb_le(&r, 8);
            memcpy(&e->wall_time, &u, sizeof u);
        } else if (field == 2 && wire == 0) {
            e->step = (int64_t)tu_pb_varint(&r);
        } else if (field == 3 && wire == 2) {
            tu_pb s = tu_pb_sub(&r);
            size_t n = (size_t)(s.end - s.p);
            ck_assert_msg(n < sizeof e->file_version, "file_version of %zu bytes", n);
            memcpy(e->file_version, s.p, n);
        } else if (field == 5 && wire == 2) {
            tu_pb s = tu_pb_sub(&r);
            e->has_summary = 1;
            while (s.p < s.end) {
                uint64_t k = tu_pb_varint(&s);
                if (k == (1 << 3 | 2)) {
                    ck_assert_msg(e->n < 64, "more than 64 values in one event");
                    tu_tb_decode_value(tu_pb_sub(&s), &e->v[e->n++]);
                } else {
                    tu_pb_skip(&s, (int)(k & 7));
                }
            }
        } else if (field == 7 && wire == 2) {
            tu_pb s = tu_pb_sub(&r);
            while (s.p < s.end) {
                uint64_t k = tu_pb_varint(&s);
                if (k == (1 << 3 | 0))
                    e->session_status = (int)tu_pb_varint(&s);
                else
                    tu_pb_skip(&s, (int)(k & 7));
            }
        } else {
            tu_pb_skip(&r, wire);
        }
    }
}

/* Every record of the event file at path, decoded; *n the count. */
static inline tu_tb_event *tu_tb_read(const char *path, int *n)
{
    char *data;
    size_t len;
    dllm_err err = {0};
    ck_assert_msg(dllm_read_file(path, &data, &len, &err) == 0, "%s", err.msg);
    const uint8_t *p = (const uint8_t *)data, *end = p + len;
    tu_tb_event *ev = NULL;
    int count = 0;
    while (p < end) {
        ck_assert_msg(end - p >= 12, "%s: a record header cut short at byte %td", path,
                      p - (const uint8_t *)data);
        tu_pb h = {p, p + 12};
        uint64_t n_data = tu_pb_le(&h, 8);
        uint32_t crc_len = (uint32_t)tu_pb_le(&h, 4);
        ck_assert_msg(crc_len == tb_masked_crc32c(p, 8), "%s: record %d: length CRC", path, count);
        ck_assert_msg((uint64_t)(end - p - 12) >= n_data + 4, "%s: record %d cut short", path,
                      count);
        tu_pb c = {p + 12 + n_data, p + 16 + n_data};
        uint32_t crc_data = (uint32_t)tu_pb_le(&c, 4);
        ck_assert_msg(crc_data == tb_masked_crc32c(p + 12, (size_t)n_data), "%s: record %d: data CRC",
                      path, count);
        ev = realloc(ev, sizeof *ev * (size_t)(count + 1));
        tu_tb_decode_event((tu_pb){p + 12, p + 12 + n_data}, &ev[count++]);
        p += 16 + n_data;
    }
    free(data);
    *n = count;
    return ev;
}

#endif
