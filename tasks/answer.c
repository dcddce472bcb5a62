/* answer.c: answer extraction and equivalence for GSM8K and MATH (see answer.h).
 *
 * MATH normalisation, in order (after Hendrycks et al.'s strip_string, extended):
 *   dollars; \! \, \; \: \quad \qquad "\ " spacing; \dfrac \tfrac -> \frac;
 *   \left \right; ^\circ ^{\circ} ° degrees; \% %; \text{..}/\textbf/\mbox/
 *   \mathrm wrappers (whole answer -> content; trailing unit -> dropped);
 *   whitespace; a leading "x =" (one short variable name); \frac12, \frac1{2},
 *   \frac{1}2 -> \frac{1}{2}; \sqrt2 -> \sqrt{2}; ".5" -> "0.5"; a trailing ".".
 * Numbers are then compared exactly: 0.5 == \frac12 == 1/2 == 0.50. */
#include "tasks/answer.h"

#include "kernels/base.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ---- */

static char *dup_range(const char *s, size_t n)
{
    char *p = dllm_malloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static char *dup_trimmed(const char *s, size_t n)
{
    while (n && is_space(*s))
        s++, n--;
    while (n && is_space(s[n - 1]))
        n--;
    return dup_range(s, n);
}

/* Last occurrence of pat in text[0, len) at or after from, or -1. */
static long find_last(const char *text, size_t len, const char *pat)
{
    size_t m = strlen(pat);
    if (m == 0 || m > len)
        return -1;
    for (size_t i = len - m + 1; i-- > 0;)
        if (text[i] == pat[0] && !memcmp(text + i, pat, m))
            return (long)i;
    return -1;
}

static long find_first(const char *text, size_t len, size_t from, const char *pat)
{
    size_t m = strlen(pat);
    if (m == 0 || m > len)
        return -1;
    for (size_t i = from; i + m <= len; i++)
        if (text[i] == pat[0] && !memcmp(text + i, pat, m))
            return (long)i;
    return -1;
}

/* ---- extraction ---- */

char *dllm_answer_xml(const char *text, size_t len, int allow_open)
{
    long a = find_last(text, len, "<answer>");
    if (a < 0)
        return NULL;
    size_t s = (size_t)a + 8;
    long e = find_first(text, len, s, "</answer>");
    if (e < 0) {
        if (!allow_open)
            return NULL;
        e = (long)len;
    }
    return dup_trimmed(text + s, (size_t)e - s);
}

char *dllm_answer_last_boxed(const char *text, size_t len)
{
    long b = find_last(text, len, "\\boxed");
    long f = find_last(text, len, "\\fbox");
    size_t i;
    if (b < 0 && f < 0)
        return NULL;
    if (b >= f)
        i = (size_t)b + 6;
    else
        i = (size_t)f + 5;
    size_t k = i;
    while (k < len && (text[k] == ' ' || text[k] == '\t'))
        k++;
    if (k < len && text[k] == '{') {
        int depth = 0;
        for (size_t j = k; j < len; j++) {
            if (text[j] == '\\' && j + 1 < len && (text[j + 1] == '{' || text[j + 1] == '}')) {
                j++; /* an escaped brace is content, not structure */
                continue;
            }
            if (text[j] == '{')
                depth++;
            else if (text[j] == '}' && --depth == 0)
                return dup_trimmed(text + k + 1, j - k - 1);
        }
        return NULL;
    }
    if (k > i && k < len) { /* "\boxed 5$" */
        size_t j = k;
        while (j < len && text[j] != '$' && text[j] != '\n')
            j++;
        return dup_trimmed(text + k, j - k);
    }
    return NULL;
}

char *dllm_answer_last_number(const char *text, size_t len)
{
    long best_s = -1;
    size_t best_e = 0;
    size_t i = 0;
    while (i < len) {
        if (!isdigit((unsigned char)text[i])) {
            i++;
            continue;
        }
        size_t s = i;
        if (s > 0 && text[s - 1] == '.' && !(s > 1 && isdigit((unsigned char)text[s - 2])))
            s--; /* ".5" */
        while (i < len) {
            if (isdigit((unsigned char)text[i]))
                i++;
            else if ((text[i] == ',' || text[i] == '.') && i + 1 < len && isdigit((unsigned char)text[i + 1]))
                i++;
            else
                break;
        }
        size_t e = i;
        if (e < len && text[e] == '%')
            e++;
        size_t ss = s;
        if (ss > 0 && text[ss - 1] == '$')
            ss--;
        if (ss > 0 && (text[ss - 1] == '-' || text[ss - 1] == '+') &&
            !(ss > 1 && isalnum((unsigned char)text[ss - 2])))
            ss--;
        best_s = (long)ss;
        best_e = e;
    }
    if (best_s < 0)
        return NULL;
    return dup_range(text + best_s, best_e - (size_t)best_s);
}

/* One decimal number, the whole of s[0, n). */
static int parse_decimal(const char *s, size_t n, dllm_rat *out)
{
    size_t i = 0;
    int neg = 0;
    while (i < n && s[i] == ' ')
        i++;
    while (n > i && s[n - 1] == ' ')
        n--;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    if (i < n && s[i] == '$')
        i++;
    if (i < n && (s[i] == '+' || s[i] == '-') && !neg && i > 0 && s[i - 1] == '$')
        neg = s[i++] == '-'; /* "$-3" */
    if (n > i && s[n - 1] == '%')
        n--;
    unsigned __int128 num = 0, den = 1;
    size_t digits = 0, group = 0;
    int seen_comma = 0, seen_dot = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (isdigit((unsigned char)c)) {
            if (num > ((unsigned __int128)1 << 100))
                return -1; /* far beyond any rational we can hold */
            num = num * 10 + (unsigned)(c - '0');
            digits++;
            group++;
            if (seen_dot) {
                if (den > ((unsigned __int128)1 << 100))
                    return -1;
                den *= 10;
            }
        } else if (c == ',' && !seen_dot) {
            /* thousands separators: 1-3 digits first, then groups of exactly 3 */
            if (digits == 0 || (seen_comma ? group != 3 : group > 3))
                return -1;
            seen_comma = 1;
            group = 0;
        } else if (c == '.' && !seen_dot) {
            if (seen_comma && group != 3)
                return -1;
            seen_dot = 1;
            seen_comma = 0;
            group = 0;
        } else {
            return -1;
        }
    }
    if (digits == 0 || (seen_comma && group != 3))
        return -1;
    if (seen_dot && group == 0)
        return -1; /* "3." */
    __int128 sn = (__int128)num;
    if (neg)
        sn = -sn;
    return dllm_rat_from128(sn, (__int128)den, out) ? -1 : 0;
}

int dllm_answer_parse_number(const char *s, dllm_rat *out)
{
    size_t n = strlen(s);
    const char *slash = memchr(s, '/', n);
    if (slash) {
        dllm_rat a, b;
        if (memchr(slash + 1, '/', n - (size_t)(slash + 1 - s)))
            return -1;
        if (parse_decimal(s, (size_t)(slash - s), &a) ||
            parse_decimal(slash + 1, n - (size_t)(slash + 1 - s), &b))
            return -1;
        return dllm_rat_div(a, b, out) ? -1 : 0;
    }
    return parse_decimal(s, n, out);
}

/* ---- GSM8K ---- */

/* The answer inside a tag or box: the whole content if it is a number, else its
 * last number, else the content itself (so that "x" vs "7" compares unequal). */
static char *number_in(char *content)
{
    dllm_rat r;
    if (!dllm_answer_parse_number(content, &r))
        return content;
    char *num = dllm_answer_last_number(content, strlen(content));
    if (num) {
        free(content);
        return num;
    }
    return content;
}

char *dllm_gsm8k_extract(const char *text, size_t len)
{
    char *a = dllm_answer_xml(text, len, 1);
    if (a) {
        char *boxed = dllm_answer_last_boxed(a, strlen(a));
        if (boxed) {
            free(a);
            a = boxed;
        }
        return number_in(a);
    }
    char *boxed = dllm_answer_last_boxed(text, len);
    if (boxed)
        return number_in(boxed);
    return dllm_answer_last_number(text, len);
}

char *dllm_gsm8k_reference(const char *solution)
{
    const char *h = strstr(solution, "####");
    if (!h)
        return NULL;
    char *r = dup_trimmed(h + 4, strlen(h + 4));
    size_t w = 0;
    for (size_t i = 0; r[i]; i++)
        if (r[i] != ',')
            r[w++] = r[i];
    r[w] = 0;
    return r;
}

static void strip_chars(char *s, const char *drop)
{
    size_t w = 0;
    for (size_t i = 0; s[i]; i++)
        if (!strchr(drop, s[i]))
            s[w++] = s[i];
    s[w] = 0;
}

int dllm_gsm8k_equal(const char *pred, const char *ref)
{
    if (!pred || !ref)
        return 0;
    dllm_rat a, b;
    if (!dllm_answer_parse_number(pred, &a) && !dllm_answer_parse_number(ref, &b))
        return dllm_rat_eq(a, b);
    /* not numbers: compare as text (commas kept: "2,50" is not 250) */
    char *p = dllm_strdup(pred), *r = dllm_strdup(ref);
    strip_chars(p, "$ \t\n%");
    strip_chars(r, "$ \t\n%");
    int eq = *p && !strcmp(p, r);
    free(p);
    free(r);
    return eq;
}

/* ---- MATH ---- */

/* Growable string. */
typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = dllm_realloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_puts(sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

/* Replaces every occurrence of pat by rep (in place, returns new string).
 * When word is set, pat must not be followed by a letter (so \left does not
 * match \leftarrow). */
static char *replace_all(char *s, const char *pat, const char *rep, int word)
{
    size_t m = strlen(pat);
    sbuf b = {0};
    sb_putn(&b, "", 0);
    for (size_t i = 0; s[i];) {
        if (!strncmp(s + i, pat, m) && !(word && isalpha((unsigned char)s[i + m]))) {
            sb_puts(&b, rep);
            i += m;
        } else {
            sb_putn(&b, s + i, 1);
            i++;
        }
    }
    free(s);
    return b.s;
}

/* Index just past the brace group opening at s[i] == '{', or 0 if unbalanced. */
static size_t skip_group(const char *s, size_t i)
{
    int depth = 0;
    for (size_t j = i; s[j]; j++) {
        if (s[j] == '{')
            depth++;
        else if (s[j] == '}' && --depth == 0)
            return j + 1;
    }
    return 0;
}

static const char *const text_cmds[] = {"\\text", "\\textbf", "\\textit", "\\mbox", "\\mathrm", "\\mathbf"};

/* If s[i..] is a text command with a brace group, its group start, else 0. */
static size_t text_cmd_at(const char *s, size_t i)
{
    for (size_t k = 0; k < sizeof text_cmds / sizeof text_cmds[0]; k++) {
        size_t m = strlen(text_cmds[k]);
        if (!strncmp(s + i, text_cmds[k], m)) {
            size_t j = i + m;
            while (s[j] == ' ')
                j++;
            if (s[j] == '{')
                return j;
        }
    }
    return 0;
}

/* \text{X} as the whole answer -> X; a trailing \text{unit} after a value -> dropped;
 * any other \text{X} -> X. */
static char *strip_text(char *s)
{
    for (int guard = 0; guard < 64; guard++) {
        size_t n = strlen(s), i;
        int changed = 0;
        for (i = 0; i < n; i++) {
            size_t g = s[i] == '\\' ? text_cmd_at(s, i) : 0;
            if (!g)
                continue;
            size_t end = skip_group(s, g);
            if (!end)
                return s;
            size_t tail = end;
            while (s[tail] == ' ')
                tail++;
            size_t head = i;
            while (head > 0 && s[head - 1] == ' ')
                head--;
            sbuf b = {0};
            sb_putn(&b, s, i);
            if (!(s[tail] == 0 && head > 0)) /* keep content unless it is a trailing unit */
                sb_putn(&b, s + g + 1, end - g - 2);
            sb_puts(&b, s + end);
            free(s);
            s = b.s;
            changed = 1;
            break;
        }
        if (!changed)
            break;
    }
    return s;
}

/* \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \frac{1}2 -> \frac{1}{2};
 * \sqrt2 -> \sqrt{2}. Whitespace has been removed already. */
static char *fix_shorthand_depth(char *s, int depth);

/* Appends the brace group s[i, end) with its content fixed too (nesting is
 * bounded: deeper groups are copied as they are). */
static void put_group(sbuf *b, const char *s, size_t i, size_t end, int depth)
{
    if (depth > 32) {
        sb_putn(b, s + i, end - i);
        return;
    }
    char *inner = dup_range(s + i + 1, end - i - 2);
    inner = fix_shorthand_depth(inner, depth + 1);
    sb_puts(b, "{");
    sb_puts(b, inner);
    sb_puts(b, "}");
    free(inner);
}

static char *fix_shorthand(char *s)
{
    return fix_shorthand_depth(s, 0);
}

static char *fix_shorthand_depth(char *s, int depth)
{
    sbuf b = {0};
    sb_putn(&b, "", 0);
    for (size_t i = 0; s[i];) {
        int frac = !strncmp(s + i, "\\frac", 5) && !isalpha((unsigned char)s[i + 5]);
        int sqrt = !strncmp(s + i, "\\sqrt", 5) && !isalpha((unsigned char)s[i + 5]);
        if (!frac && !sqrt) {
            sb_putn(&b, s + i, 1);
            i++;
            continue;
        }
        sb_putn(&b, s + i, 5);
        i += 5;
        int nargs = frac ? 2 : 1;
        if (sqrt && s[i] == '[') { /* \sqrt[3]{x}: keep the index as written */
            const char *close = strchr(s + i, ']');
            if (!close)
                continue;
            sb_putn(&b, s + i, (size_t)(close - (s + i)) + 1);
            i = (size_t)(close - s) + 1;
        }
        for (int a = 0; a < nargs && s[i]; a++) {
            if (s[i] == '{') {
                size_t end = skip_group(s, i);
                if (!end)
                    break;
                put_group(&b, s, i, end, depth);
                i = end;
            } else if (s[i] == '\\') { /* a command argument, e.g. \frac\pi2 */
                size_t j = i + 1;
                while (isalpha((unsigned char)s[j]))
                    j++;
                sb_puts(&b, "{");
                sb_putn(&b, s + i, j - i);
                sb_puts(&b, "}");
                i = j;
            } else {
                sb_puts(&b, "{");
                sb_putn(&b, s + i, 1);
                sb_puts(&b, "}");
                i++;
            }
        }
    }
    free(s);
    return b.s;
}

static int is_var_name(const char *s, size_t n)
{
    if (n == 0 || n > 8)
        return 0;
    if (s[0] == '\\') { /* \alpha, \theta */
        for (size_t i = 1; i < n; i++)
            if (!isalpha((unsigned char)s[i]))
                return 0;
        return n > 1;
    }
    if (n > 2)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalpha((unsigned char)s[i]) && !(i > 0 && isdigit((unsigned char)s[i])))
            return 0;
    return 1;
}

char *dllm_math_normalize(const char *in)
{
    char *s = dllm_strdup(in);
    static const char *const drops[] = {"\\!", "\\,", "\\;", "\\:", "\\ ", "\\$", "\\%", "$", "%",
                                        "^{\\circ}", "^\\circ", "\xc2\xb0" /* ° */};
    for (size_t k = 0; k < sizeof drops / sizeof drops[0]; k++)
        s = replace_all(s, drops[k], "", 0);
    s = replace_all(s, "\\qquad", "", 1);
    s = replace_all(s, "\\quad", "", 1);
    s = replace_all(s, "\\dfrac", "\\frac", 1);
    s = replace_all(s, "\\tfrac", "\\frac", 1);
    s = replace_all(s, "\\left", "", 1);
    s = replace_all(s, "\\right", "", 1);
    s = replace_all(s, "\\displaystyle", "", 1);
    s = strip_text(s);
    /* whitespace */
    size_t w = 0;
    for (size_t i = 0; s[i]; i++)
        if (!is_space(s[i]))
            s[w++] = s[i];
    s[w] = 0;
    /* trailing "degrees"/"degree" (the units word survives \text removal) */
    static const char *const units[] = {"degrees", "degree"};
    for (size_t k = 0; k < 2; k++) {
        size_t n = strlen(s), m = strlen(units[k]);
        if (n > m && !strcmp(s + n - m, units[k])) {
            s[n - m] = 0;
            break;
        }
    }
    /* leading "x=" */
    char *eq = strchr(s, '=');
    if (eq && !strchr(eq + 1, '=') && is_var_name(s, (size_t)(eq - s)))
        memmove(s, eq + 1, strlen(eq + 1) + 1);
    s = fix_shorthand(s);
    /* ".5" -> "0.5" */
    sbuf b = {0};
    sb_putn(&b, "", 0);
    for (size_t i = 0; s[i]; i++) {
        if (s[i] == '.' && isdigit((unsigned char)s[i + 1]) && (i == 0 || !isdigit((unsigned char)s[i - 1])))
            sb_puts(&b, "0");
        sb_putn(&b, s + i, 1);
    }
    free(s);
    s = b.s;
    size_t n = strlen(s);
    if (n > 1 && s[n - 1] == '.')
        s[n - 1] = 0;
    return s;
}

/* A normalised string as a rational: a number, a/b, or [-]\frac{a}{b}. */
static int math_number(const char *s, dllm_rat *out)
{
    if (!dllm_answer_parse_number(s, out))
        return 0;
    int neg = 0;
    if (*s == '-' || *s == '+')
        neg = *s++ == '-';
    if (strncmp(s, "\\frac{", 6))
        return -1;
    size_t e1 = skip_group(s, 5);
    if (!e1 || s[e1] != '{')
        return -1;
    size_t e2 = skip_group(s, e1);
    if (!e2 || s[e2] != 0)
        return -1;
    char *a = dup_range(s + 6, e1 - 7), *b2 = dup_range(s + e1 + 1, e2 - e1 - 2);
    dllm_rat x, y;
    int rc = -1;
    if (!dllm_answer_parse_number(a, &x) && !dllm_answer_parse_number(b2, &y) && !dllm_rat_div(x, y, out)) {
        rc = 0;
        if (neg)
            out->num = -out->num;
    }
    free(a);
    free(b2);
    return rc;
}

int dllm_math_equiv(const char *a, const char *b)
{
    if (!a || !b)
        return 0;
    char *na = dllm_math_normalize(a), *nb = dllm_math_normalize(b);
    dllm_rat x, y;
    int eq;
    if (!math_number(na, &x) && !math_number(nb, &y))
        eq = dllm_rat_eq(x, y);
    else
        eq = *na && !strcmp(na, nb);
    free(na);
    free(nb);
    return eq;
}
