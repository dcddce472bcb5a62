/* test_tb_events: the TensorBoard event file writer (src/tb_events.c).
 *  - CRC32C against the published test vectors (RFC 3720, appendix B.4, and the
 *    check value of "123456789"), and the TFRecord mask;
 *  - Event protobufs and TFRecord framing against bytes worked out by hand from
 *    the wire format (the same bytes the protobuf library serialises);
 *  - the writer: a file that opens with its file_version, one flushed record per
 *    step, a resumed run's file named after the first and opening with a restart at
 *    its first step, a directory that cannot be written refused naming the path. */
#include "src/tb_events.h"
#include "tests/tb_read.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void assert_bytes(const tb_buf *b, const uint8_t *want, size_t n, const char *what)
{
    ck_assert_msg(b->n == n, "%s: %zu bytes, want %zu", what, b->n, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(b->p[i] == want[i], "%s: byte %zu is %02x, want %02x", what, i, b->p[i],
                      want[i]);
}

START_TEST(crc32c_vectors)
{
    uint8_t buf[32];
    memset(buf, 0, sizeof buf);
    ck_assert_uint_eq(tb_crc32c(buf, 32), 0x8A9136AAu);
    memset(buf, 0xFF, sizeof buf);
    ck_assert_uint_eq(tb_crc32c(buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    ck_assert_uint_eq(tb_crc32c(buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    ck_assert_uint_eq(tb_crc32c(buf, 32), 0x113FDB5Cu);
    ck_assert_uint_eq(tb_crc32c("123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(tb_crc32c("", 0), 0);
    /* mask: rotate right by 15, add 0xa282ead8 */
    ck_assert_uint_eq(tb_masked_crc32c("", 0), 0xA282EAD8u);
    ck_assert_uint_eq(tb_masked_crc32c("123456789", 9),
                      (((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u) & 0xFFFFFFFFu);
}
END_TEST

START_TEST(event_bytes)
{
    tb_buf b = {0};
    /* wall_time 1.5: key 1<<3|1 = 0x09, the double's 8 bytes little-endian;
     * file_version: key 3<<3|2 = 0x1a, length 13, the text */
    static const uint8_t version[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,
                                      0x1a, 0x0d, 'b',  'r',  'a',  'i',  'n',  '.',  'E',
                                      'v',  'e',  'n',  't',  ':',  '2'};
    tb_event_file_version(&b, 1.5);
    assert_bytes(&b, version, sizeof version, "file_version event");

    /* step 300: key 0x10, varint ac 02; summary: key 5<<3|2 = 0x2a, 15 bytes: one
     * Value (key 0x0a, 13 bytes): tag (0x0a, 6, "s/loss"), simple_value (key
     * 2<<3|5 = 0x15, 0.25f = 0x3e800000 little-endian); the NaN value is left out */
    static const uint8_t scalar[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x10,
                                     0xac, 0x02, 0x2a, 0x0f, 0x0a, 0x0d, 0x0a, 0x06, 's',  '/',
                                     'l',  'o',  's',  's',  0x15, 0x00, 0x00, 0x80, 0x3e};
    const char *names[3] = {"loss", "alpha", "k3"};
    const double values[3] = {0.25, NAN, INFINITY};
    b.n = 0;
    tb_event_scalars(&b, 2.0, 300, "s/", 3, names, values);
    assert_bytes(&b, scalar, sizeof scalar, "scalar event");

    /* SessionLog START at step 3: session_log is field 7 (key 0x3a), status field 1 = 1 */
    static const uint8_t start[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8,
                                    0x3f, 0x10, 0x03, 0x3a, 0x02, 0x08, 0x01};
    b.n = 0;
    tb_event_start(&b, 1.5, 3);
    assert_bytes(&b, start, sizeof start, "start event");

    /* a step past 32 bits, 2^35 + 1: six varint bytes; no finite value: an empty summary */
    static const uint8_t big[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe0, 0x3f, 0x10,
                                  0x81, 0x80, 0x80, 0x80, 0x80, 0x01, 0x2a, 0x00};
    const double none[1] = {NAN};
    b.n = 0;
    tb_event_scalars(&b, 0.5, ((int64_t)1 << 35) + 1, "", 1, names, none);
    assert_bytes(&b, big, sizeof big, "large step");

    /* step 0 is proto3's default: not written */
    static const uint8_t zero[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3f,
                                   0x2a, 0x0b, 0x0a, 0x09, 0x0a, 0x02, 'k',  '3',  0x15,
                                   0x00, 0x00, 0xc0, 0xbf};
    const double minus[1] = {-1.5};
    b.n = 0;
    tb_event_scalars(&b, 1.0, 0, "", 1, names + 2, minus);
    assert_bytes(&b, zero, sizeof zero, "step 0");
    tb_buf_free(&b);
}
END_TEST

START_TEST(record_framing)
{
    /* uint64 length, masked CRC32C of those 8 bytes, data, masked CRC32C of the data;
     * the CRCs as TensorFlow's record writer computes them */
    tb_buf b = {0};
    static const uint8_t empty[] = {0, 0, 0, 0, 0, 0, 0, 0, 0x29, 0x03, 0x98, 0x07,
                                    0xd8, 0xea, 0x82, 0xa2};
    tb_record(&b, (const uint8_t *)"", 0);
    assert_bytes(&b, empty, sizeof empty, "empty record");
    static const uint8_t abc[] = {3,    0,    0,    0,    0,   0,   0,   0,    0xb0, 0x99, 0x49,
                                  0x0e, 'a',  'b',  'c',  0x6e, 0x57, 0xf1, 0x21};
    b.n = 0;
    tb_record(&b, (const uint8_t *)"abc", 3);
    assert_bytes(&b, abc, sizeof abc, "record of abc");
    /* the file_version event of event_bytes, framed */
    tb_buf ev = {0};
    tb_event_file_version(&ev, 1.5);
    b.n = 0;
    tb_record(&b, ev.p, ev.n);
    static const uint8_t head[] = {0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22};
    static const uint8_t tail[] = {0x2a, 0x28, 0x64, 0x6c};
    ck_assert_uint_eq(b.n, 12 + 24 + 4);
    ck_assert_int_eq(memcmp(b.p, head, 12), 0);
    ck_assert_int_eq(memcmp(b.p + 12, ev.p, 24), 0);
    ck_assert_int_eq(memcmp(b.p + 36, tail, 4), 0);
    tb_buf_free(&ev);
    tb_buf_free(&b);
}
END_TEST

/* The event files of dir in name order (at most 8). */
static int event_files(const char *dir, char names[8][512])
{
    int n = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "events.out.tfevents.", 20)) {
            ck_assert_int_lt(n, 8);
            snprintf(names[n++], 512, "%s/%s", dir, e->d_name);
        }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[512];
            memcpy(t, names[j], 512);
            memcpy(names[j], names[j - 1], 512);
            memcpy(names[j - 1], t, 512);
        }
    return n;
}

START_TEST(writer_files)
{
    char dir[] = "/tmp/dllm-tb-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    dllm_err err = {0};
    tb_writer *w;
    ck_assert_msg(tb_writer_open(&w, dir, -1, &err) == 0, "%s", err.msg);
    const char *names[2] = {"a", "b"};
    for (int s = 1; s <= 3; s++) {
        double v[2] = {s * 0.5, s == 2 ? NAN : -s};
        ck_assert_msg(tb_write_scalars(w, s, "steps/", 2, names, v, &err) == 0, "%s", err.msg);
        /* flushed per step: the file holds the step before the writer closes */
        int n;
        tu_tb_event *ev = tu_tb_read(tb_writer_path(w), &n);
        ck_assert_int_eq(n, 1 + s);
        ck_assert_int_eq(ev[s].step, s);
        ck_assert_int_eq(ev[s].n, s == 2 ? 1 : 2);
        ck_assert_str_eq(ev[s].v[0].tag, "steps/a");
        ck_assert_float_eq(ev[s].v[0].value, (float)(s * 0.5));
        if (s != 2) {
            ck_assert_str_eq(ev[s].v[1].tag, "steps/b");
            ck_assert_float_eq(ev[s].v[1].value, (float)-s);
        }
        free(ev);
    }
    ck_assert_int_eq(tb_writer_close(w), 0);
    /* a resumed run (same second, most likely): a second file, after the first by name */
    ck_assert_msg(tb_writer_open(&w, dir, 3, &err) == 0, "%s", err.msg);
    double v2[2] = {7, 8};
    ck_assert_int_eq(tb_write_scalars(w, 3, "steps/", 2, names, v2, &err), 0);
    ck_assert_int_eq(tb_writer_close(w), 0);
    char files[8][512];
    ck_assert_int_eq(event_files(dir, files), 2);
    int n0, n1;
    tu_tb_event *a = tu_tb_read(files[0], &n0), *b = tu_tb_read(files[1], &n1);
    ck_assert_int_eq(n0, 4);
    ck_assert_str_eq(a[0].file_version, "brain.Event:2");
    ck_assert_int_eq(a[0].has_summary, 0);
    ck_assert_int_eq(a[0].session_status, 0);
    ck_assert_int_eq(n1, 3);
    ck_assert_str_eq(b[0].file_version, "brain.Event:2");
    ck_assert_int_eq(b[1].session_status, 1); /* START */
    ck_assert_int_eq(b[1].step, 3);
    ck_assert_int_eq(b[1].has_summary, 0);
    ck_assert_int_eq(b[2].step, 3);
    ck_assert_float_eq(b[2].v[1].value, 8.0f);
    /* wall times: seconds since the epoch, this century */
    ck_assert(a[0].wall_time > 1.6e9 && b[2].wall_time >= a[0].wall_time);
    free(a);
    free(b);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(unwritable_directory_is_refused)
{
    dllm_err err = {0};
    tb_writer *w = (tb_writer *)&err;
    ck_assert_int_eq(tb_writer_open(&w, "/nonexistent-dllm-dir", -1, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(err.msg, "/nonexistent-dllm-dir/events.out.tfevents.") &&
                      strstr(err.msg, "cannot create"),
                  "%s", err.msg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tb_events");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, crc32c_vectors);
    tcase_add_test(tc, event_bytes);
    tcase_add_test(tc, record_framing);
    tcase_add_test(tc, writer_files);
    tcase_add_test(tc, unwritable_directory_is_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
