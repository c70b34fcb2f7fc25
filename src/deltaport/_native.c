/* The server's per-file loops over a large response, compiled: each file's id (MD5), its URL's
 * signature (keyed BLAKE2b) and the join of its NDJSON line with JSON string escaping.
 *
 * Optional: built when a C compiler is present at install (setup.py marks it optional); without it
 * the same bytes come from hashlib and Arrow's string kernels (columnar_lines, file_keys).
 * Held equal by tests/test_native.py, against hashlib and orjson.
 *
 * Every function takes strings as Arrow does: one data buffer and int64 offsets (n + 1 of them),
 * checked before use. The loops run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- strings as offsets + data */

typedef struct {
    Py_buffer off, data;
    const int64_t *o;
    const uint8_t *d;
} strings;

static void strings_release(strings *s) {
    if (s->off.obj) PyBuffer_Release(&s->off);
    if (s->data.obj) PyBuffer_Release(&s->data);
}

/* Take n strings from (offsets, data), or as many as the offsets give when n is -1; the count
 * taken, or -1 with an exception set. */
static Py_ssize_t strings_get(PyObject *offsets, PyObject *data, Py_ssize_t n, strings *s) {
    memset(s, 0, sizeof(*s));
    if (PyObject_GetBuffer(offsets, &s->off, PyBUF_SIMPLE) < 0) return -1;
    if (PyObject_GetBuffer(data, &s->data, PyBUF_SIMPLE) < 0) {
        strings_release(s);
        return -1;
    }
    if (n == -1) n = s->off.len / 8 - 1;
    if (n < 0 || s->off.len / 8 < n + 1) {
        PyErr_Format(PyExc_ValueError, "offsets: %zd bytes hold fewer than %zd int64 offsets", s->off.len, n + 1);
        strings_release(s);
        return -1;
    }
    s->o = (const int64_t *)s->off.buf;
    s->d = (const uint8_t *)s->data.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s->o[i] < 0 || s->o[i] > s->o[i + 1] || s->o[i + 1] > s->data.len) {
            PyErr_Format(PyExc_ValueError, "offsets: value %zd [%lld, %lld) is outside the %zd data bytes", i,
                         (long long)s->o[i], (long long)s->o[i + 1], s->data.len);
            strings_release(s);
            return -1;
        }
    }
    return n;
}

static inline uint32_t load32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t load64(const uint8_t *p) { return (uint64_t)load32(p) | (uint64_t)load32(p + 4) << 32; }

/* ---------------------------------------------------------------- MD5 (RFC 1321) */

static uint32_t MD5_K[64];
static const uint8_t MD5_S[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                  5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                  4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                  6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

#define MD5_STEP(i, f, g)                                         \
    do {                                                          \
        uint32_t x = a + (f) + MD5_K[i] + m[g];                   \
        a = d;                                                    \
        d = c;                                                    \
        c = b;                                                    \
        b += (x << MD5_S[i]) | (x >> (32 - MD5_S[i]));            \
    } while (0)

static void md5_block(uint32_t h[4], const uint8_t *p) {
    uint32_t m[16], a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 16; i++) m[i] = load32(p + 4 * i);
    /* four rounds of sixteen steps, each round its own loop so that it unrolls */
    for (int i = 0; i < 16; i++) MD5_STEP(i, (b & c) | (~b & d), i);
    for (int i = 16; i < 32; i++) MD5_STEP(i, (d & b) | (~d & c), (5 * i + 1) & 15);
    for (int i = 32; i < 48; i++) MD5_STEP(i, b ^ c ^ d, (3 * i + 5) & 15);
    for (int i = 48; i < 64; i++) MD5_STEP(i, c ^ (b | ~d), (7 * i) & 15);
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

static void md5(const uint8_t *p, size_t n, uint8_t out[16]) {
    uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    size_t i = 0;
    for (; i + 64 <= n; i += 64) md5_block(h, p + i);
    uint8_t tail[128] = {0};
    size_t rest = n - i, size = rest + 9 <= 64 ? 64 : 128;
    memcpy(tail, p + i, rest);
    tail[rest] = 0x80;
    uint64_t bits = (uint64_t)n * 8;
    for (int k = 0; k < 8; k++) tail[size - 8 + k] = (uint8_t)(bits >> (8 * k));
    md5_block(h, tail);
    if (size == 128) md5_block(h, tail + 64);
    for (int k = 0; k < 16; k++) out[k] = (uint8_t)(h[k / 4] >> (8 * (k % 4)));
}

/* ---------------------------------------------------------------- BLAKE2b (RFC 7693) */

static const uint64_t B2_IV[8] = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                                  0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                                  0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};
static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

typedef struct {
    uint64_t h[8], t;
    uint8_t b[128];
    size_t c, outlen;
} blake2b;

#define ROTR64(x, r) (((x) >> (r)) | ((x) << (64 - (r))))
#define B2G(a, b, c, d, x, y)              \
    do {                                   \
        v[a] = v[a] + v[b] + (x);          \
        v[d] = ROTR64(v[d] ^ v[a], 32);    \
        v[c] = v[c] + v[d];                \
        v[b] = ROTR64(v[b] ^ v[c], 24);    \
        v[a] = v[a] + v[b] + (y);          \
        v[d] = ROTR64(v[d] ^ v[a], 16);    \
        v[c] = v[c] + v[d];                \
        v[b] = ROTR64(v[b] ^ v[c], 63);    \
    } while (0)

static void b2_compress(blake2b *s, int last) {
    uint64_t v[16], m[16];
    for (int i = 0; i < 8; i++) {
        v[i] = s->h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= s->t; /* the high word of the counter stays 0: inputs here are far below 2^64 bytes */
    if (last) v[14] = ~v[14];
    for (int i = 0; i < 16; i++) m[i] = load64(s->b + 8 * i);
    for (int r = 0; r < 12; r++) {
        const uint8_t *z = B2_SIGMA[r];
        B2G(0, 4, 8, 12, m[z[0]], m[z[1]]);
        B2G(1, 5, 9, 13, m[z[2]], m[z[3]]);
        B2G(2, 6, 10, 14, m[z[4]], m[z[5]]);
        B2G(3, 7, 11, 15, m[z[6]], m[z[7]]);
        B2G(0, 5, 10, 15, m[z[8]], m[z[9]]);
        B2G(1, 6, 11, 12, m[z[10]], m[z[11]]);
        B2G(2, 7, 8, 13, m[z[12]], m[z[13]]);
        B2G(3, 4, 9, 14, m[z[14]], m[z[15]]);
    }
    for (int i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
}

static void b2_update(blake2b *s, const uint8_t *p, size_t n) {
    while (n > 0) {
        if (s->c == 128) { /* a full block is compressed only once more input follows */
            s->t += 128;
            b2_compress(s, 0);
            s->c = 0;
        }
        size_t take = 128 - s->c < n ? 128 - s->c : n;
        memcpy(s->b + s->c, p, take);
        s->c += take;
        p += take;
        n -= take;
    }
}

static void b2_init(blake2b *s, size_t outlen, const uint8_t *key, size_t keylen) {
    memcpy(s->h, B2_IV, sizeof(s->h));
    s->h[0] ^= 0x01010000ULL ^ ((uint64_t)keylen << 8) ^ outlen;
    s->t = 0;
    s->c = 0;
    s->outlen = outlen;
    if (keylen) {
        uint8_t block[128] = {0};
        memcpy(block, key, keylen);
        b2_update(s, block, 128);
    }
}

static void b2_final(blake2b *s, uint8_t *out) {
    s->t += s->c;
    memset(s->b + s->c, 0, 128 - s->c);
    b2_compress(s, 1);
    for (size_t k = 0; k < s->outlen; k++) out[k] = (uint8_t)(s->h[k / 8] >> (8 * (k % 8)));
}

/* ---------------------------------------------------------------- md5_each, mac_each, only */

static PyObject *md5_each(PyObject *self, PyObject *args) {
    PyObject *data, *offsets;
    if (!PyArg_ParseTuple(args, "OO", &data, &offsets)) return NULL;
    strings s;
    Py_ssize_t n = strings_get(offsets, data, -1, &s);
    if (n < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 16 * n);
    if (out) {
        uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n; i++) md5(s.d + s.o[i], (size_t)(s.o[i + 1] - s.o[i]), o + 16 * i);
        Py_END_ALLOW_THREADS
    }
    strings_release(&s);
    return out;
}

/* The keyed BLAKE2b of head + each string, with '=' read as "%3D" when asked (an ordinary log
 * path's canonical URI), digests of ``size`` bytes joined. */
static PyObject *mac_each(PyObject *self, PyObject *args) {
    PyObject *data, *offsets;
    Py_buffer key, head;
    Py_ssize_t size;
    int encode_eq;
    if (!PyArg_ParseTuple(args, "OOy*y*np", &data, &offsets, &key, &head, &size, &encode_eq)) return NULL;
    PyObject *out = NULL;
    strings s;
    Py_ssize_t n;
    if (key.len > 64 || size < 1 || size > 64) {
        PyErr_SetString(PyExc_ValueError, "mac_each: the key is at most 64 bytes, the digest 1 to 64");
    } else if ((n = strings_get(offsets, data, -1, &s)) >= 0) {
        out = PyBytes_FromStringAndSize(NULL, size * n);
        if (out) {
            uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
            Py_BEGIN_ALLOW_THREADS blake2b start;
            b2_init(&start, (size_t)size, key.buf, (size_t)key.len);
            b2_update(&start, head.buf, (size_t)head.len);
            for (Py_ssize_t i = 0; i < n; i++) {
                blake2b st = start;
                const uint8_t *p = s.d + s.o[i], *end = s.d + s.o[i + 1];
                if (encode_eq) {
                    const uint8_t *q;
                    while ((q = memchr(p, '=', (size_t)(end - p))) != NULL) {
                        b2_update(&st, p, (size_t)(q - p));
                        b2_update(&st, (const uint8_t *)"%3D", 3);
                        p = q + 1;
                    }
                }
                b2_update(&st, p, (size_t)(end - p));
                b2_final(&st, o + size * i);
            }
            Py_END_ALLOW_THREADS
        }
        strings_release(&s);
    }
    PyBuffer_Release(&key);
    PyBuffer_Release(&head);
    return out;
}

/* Whether every byte of data is one of allowed's. */
static PyObject *only(PyObject *self, PyObject *args) {
    Py_buffer data, allowed;
    if (!PyArg_ParseTuple(args, "y*y*", &data, &allowed)) return NULL;
    uint8_t ok[256] = {0};
    for (Py_ssize_t i = 0; i < allowed.len; i++) ok[((const uint8_t *)allowed.buf)[i]] = 1;
    const uint8_t *p = data.buf;
    int all = 1;
    Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < data.len; i++) all &= ok[p[i]];
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&allowed);
    return PyBool_FromLong(all);
}

/* ---------------------------------------------------------------- Lines: an owned buffer */

typedef struct {
    PyObject_HEAD char *buf;
    Py_ssize_t len;
    size_t cap;
} Lines;

/* A few freed buffers kept for the next join (touched with the GIL held): a response's chunks are
 * each tens of MB, and memory handed back to the system costs a page fault per 4 KiB again. */
#define SPARE_BUFFERS 3
#define SPARE_MAX_BYTES ((size_t)64 << 20)
static struct {
    char *buf;
    size_t cap;
} spare[SPARE_BUFFERS];

static void buffer_drop(char *buf, size_t cap) {
    for (int i = 0; buf && cap <= SPARE_MAX_BYTES && i < SPARE_BUFFERS; i++) {
        if (!spare[i].buf) {
            spare[i].buf = buf;
            spare[i].cap = cap;
            return;
        }
    }
    free(buf);
}

/* A buffer of at least size bytes: the smallest spare that fits, else the largest spare grown
 * (realloc keeps its pages), else a new one. */
static char *buffer_take(size_t size, size_t *cap) {
    int best = -1;
    for (int i = 0; i < SPARE_BUFFERS; i++) {
        if (!spare[i].buf) continue;
        int fits = spare[i].cap >= size, best_fits = best >= 0 && spare[best].cap >= size;
        if (best < 0 || (fits && (!best_fits || spare[i].cap < spare[best].cap)) || (!best_fits && spare[i].cap > spare[best].cap))
            best = i;
    }
    if (best < 0) {
        *cap = size;
        return malloc(size);
    }
    char *buf = spare[best].buf;
    *cap = spare[best].cap;
    spare[best].buf = NULL;
    if (*cap < size) {
        char *grown = realloc(buf, size);
        if (!grown) {
            free(buf);
            return NULL;
        }
        buf = grown;
        *cap = size;
    }
    return buf;
}

static int lines_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Lines *l = (Lines *)self;
    return PyBuffer_FillInfo(view, self, l->buf, l->len, 1, flags);
}

static void lines_dealloc(PyObject *self) {
    buffer_drop(((Lines *)self)->buf, ((Lines *)self)->cap);
    Py_TYPE(self)->tp_free(self);
}

static Py_ssize_t lines_length(PyObject *self) { return ((Lines *)self)->len; }

static PyBufferProcs lines_as_buffer = {lines_getbuffer, NULL};
static PySequenceMethods lines_as_sequence = {.sq_length = lines_length};

static PyTypeObject LinesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "deltaport._native.Lines",
    .tp_doc = "A response's joined lines: a read-only buffer (memoryview it).",
    .tp_basicsize = sizeof(Lines),
    .tp_dealloc = lines_dealloc,
    .tp_as_buffer = &lines_as_buffer,
    .tp_as_sequence = &lines_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* ---------------------------------------------------------------- join */

enum { RAW = 0, QUOTED = 1 };
enum { CONSTANT, COLUMN, GROUP };

typedef struct {
    int kind, mode;
    Py_buffer text;     /* a constant's bytes, or a column's null_as */
    int has_text;       /* a column: whether a null is written as text (else the value is absent) */
    strings s;          /* a column's values */
    Py_buffer valid;    /* a column's validity bitmap, if any */
    Py_ssize_t voffset; /* its first value's bit */
    Py_ssize_t end;     /* a group: the index after its last piece */
} piece;

typedef struct {
    piece *p;
    Py_ssize_t count, cap;
} program;

static void program_free(program *g) {
    for (Py_ssize_t i = 0; i < g->count; i++) {
        piece *p = &g->p[i];
        if (p->text.obj) PyBuffer_Release(&p->text);
        if (p->valid.obj) PyBuffer_Release(&p->valid);
        strings_release(&p->s);
    }
    free(g->p);
}

static piece *program_add(program *g) {
    if (g->count == g->cap) {
        Py_ssize_t cap = g->cap ? 2 * g->cap : 16;
        piece *p = realloc(g->p, (size_t)cap * sizeof(piece));
        if (!p) return (piece *)PyErr_NoMemory();
        g->p = p;
        g->cap = cap;
    }
    piece *p = &g->p[g->count++];
    memset(p, 0, sizeof(*p));
    return p;
}

/* One column: (offsets, data, validity or None, validity bit offset, mode, null_as or None). */
static int column_get(PyObject *item, Py_ssize_t n, piece *p) {
    PyObject *offsets, *data, *valid, *null_as;
    Py_ssize_t voffset;
    int mode;
    if (!PyArg_ParseTuple(item, "OOOniO", &offsets, &data, &valid, &voffset, &mode, &null_as)) return -1;
    p->kind = COLUMN;
    p->mode = mode;
    if (mode != RAW && mode != QUOTED) {
        PyErr_Format(PyExc_ValueError, "join: unknown mode %d", mode);
        return -1;
    }
    if (strings_get(offsets, data, n, &p->s) < 0) return -1;
    if (valid != Py_None) {
        if (PyObject_GetBuffer(valid, &p->valid, PyBUF_SIMPLE) < 0) return -1;
        if (voffset < 0 || p->valid.len * 8 < voffset + n) {
            PyErr_SetString(PyExc_ValueError, "join: the validity bitmap is shorter than its values");
            return -1;
        }
        p->voffset = voffset;
    }
    if (null_as != Py_None) {
        if (PyObject_GetBuffer(null_as, &p->text, PyBUF_SIMPLE) < 0) return -1;
        p->has_text = 1;
    }
    return 0;
}

static int program_get(PyObject *pieces, Py_ssize_t n, program *g, int nested) {
    PyObject *seq = PySequence_Fast(pieces, "join: the pieces must be a sequence");
    if (!seq) return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        piece *p = program_add(g);
        if (!p) {
            rc = -1;
        } else if (PyBytes_Check(item)) {
            p->kind = CONSTANT;
            rc = PyObject_GetBuffer(item, &p->text, PyBUF_SIMPLE);
        } else if (PyTuple_Check(item)) {
            rc = column_get(item, n, p);
        } else if (PyList_Check(item) && !nested) {
            Py_ssize_t at = g->count - 1;
            g->p[at].kind = GROUP;
            rc = program_get(item, n, g, 1);
            g->p[at].end = g->count; /* g->p may have moved */
        } else {
            PyErr_SetString(PyExc_TypeError, "join: a piece is bytes, a column tuple, or a list (an optional group)");
            rc = -1;
        }
    }
    Py_DECREF(seq);
    return rc;
}

static inline int is_valid(const piece *p, Py_ssize_t r) {
    if (!p->valid.obj) return 1;
    Py_ssize_t bit = p->voffset + r;
    return (((const uint8_t *)p->valid.buf)[bit >> 3] >> (bit & 7)) & 1;
}

typedef struct {
    char *buf;
    size_t len, cap;
} out_buffer;

static int reserve(out_buffer *o, size_t more) {
    if (o->cap - o->len >= more) return 0;
    size_t cap = o->cap + o->cap / 2;
    if (cap < o->len + more) cap = o->len + more;
    char *b = realloc(o->buf, cap);
    if (!b) return -1;
    o->buf = b;
    o->cap = cap;
    return 0;
}

static uint8_t NEEDS_ESCAPE[256];

#ifdef __SSE2__
#include <emmintrin.h>
typedef __m128i block16;
static inline block16 load16(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }
static inline void store16(char *w, block16 x) { _mm_storeu_si128((__m128i *)w, x); }
/* A bit per byte of x that is '"', '\\' or below 0x20. */
static inline unsigned special16(block16 x) {
    __m128i q = _mm_cmpeq_epi8(x, _mm_set1_epi8('"'));
    __m128i b = _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'));
    __m128i c = _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x1f)), x);
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, b), c));
}
#else /* two words at a time, by the usual bit tricks */
typedef struct {
    uint64_t lo, hi;
} block16;
static inline block16 load16(const uint8_t *p) {
    block16 x;
    memcpy(&x, p, 16);
    return x;
}
static inline void store16(char *w, block16 x) { memcpy(w, &x, 16); }
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline uint64_t special8(uint64_t x) {
    uint64_t q = x ^ (ONES * '"'), b = x ^ (ONES * '\\');
    return (((q - ONES) & ~q) | ((b - ONES) & ~b) | ((x - ONES * 0x20) & ~x)) & HIGHS;
}
static inline unsigned special16(block16 x) {
    /* only "none" is exact here: report the first byte, which the caller then looks at itself */
    return special8(x.lo) || special8(x.hi) ? 1 : 0;
}
#endif

/* n bytes from p to w, without a call: 16 at a time, the last 16 overlapping. */
static inline char *copy(char *w, const uint8_t *p, size_t n) {
    if (n >= 16) {
        for (size_t i = 0; i + 16 <= n; i += 16) store16(w + i, load16(p + i));
        store16(w + n - 16, load16(p + n - 16));
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, p + n - 8, 8);
        memcpy(w, &a, 8);
        memcpy(w + n - 8, &b, 8);
    } else {
        for (size_t i = 0; i < n; i++) w[i] = (char)p[i];
    }
    return w + n;
}

static char *escape_byte(char *w, uint8_t c) {
    static const char hex[] = "0123456789abcdef";
    if (!NEEDS_ESCAPE[c]) {
        *w++ = (char)c;
        return w;
    }
    *w++ = '\\';
    switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '\b': *w++ = 'b'; break;
        case '\t': *w++ = 't'; break;
        case '\n': *w++ = 'n'; break;
        case '\f': *w++ = 'f'; break;
        case '\r': *w++ = 'r'; break;
        default:
            memcpy(w, "u00", 3);
            w[3] = hex[c >> 4];
            w[4] = hex[c & 15];
            w += 5;
    }
    return w;
}

/* JSON string content, as orjson writes it: '"' and '\\' and control characters escaped, other
 * bytes (UTF-8 included) as they are. Room for 6 bytes per input byte is reserved by the caller,
 * so a block of 16 may be stored whole before its first special byte is known. */
static char *escape(char *w, const uint8_t *p, const uint8_t *end) {
    while (end - p >= 16) {
        block16 x = load16(p);
        store16(w, x);
        unsigned m = special16(x);
        if (!m) {
            p += 16;
            w += 16;
            continue;
        }
        int k = __builtin_ctz(m);
        p += k;
        w += k;
        w = escape_byte(w, *p++);
    }
    while (p < end) w = escape_byte(w, *p++);
    return w;
}

/* Writes row r's pieces [from, to); 0, or -1 when out of memory, -2 when a required value is null. */
static int write_row(const program *g, Py_ssize_t from, Py_ssize_t to, Py_ssize_t r, out_buffer *o) {
    for (Py_ssize_t i = from; i < to; i++) {
        const piece *p = &g->p[i];
        if (p->kind == GROUP) {
            int present = 1;
            for (Py_ssize_t j = i + 1; j < p->end; j++)
                if (g->p[j].kind == COLUMN && !g->p[j].has_text && !is_valid(&g->p[j], r)) present = 0;
            if (present) {
                int rc = write_row(g, i + 1, p->end, r, o);
                if (rc) return rc;
            }
            i = p->end - 1;
        } else if (p->kind == CONSTANT || !is_valid(p, r)) {
            if (p->kind == COLUMN && !p->has_text) return -2;
            if (reserve(o, (size_t)p->text.len)) return -1;
            o->len = (size_t)(copy(o->buf + o->len, p->text.buf, (size_t)p->text.len) - o->buf);
        } else {
            const uint8_t *a = p->s.d + p->s.o[r], *b = p->s.d + p->s.o[r + 1];
            if (reserve(o, 6 * (size_t)(b - a) + 2)) return -1;
            char *w = o->buf + o->len;
            if (p->mode == QUOTED) *w++ = '"';
            if (p->mode == RAW) {
                w = copy(w, a, (size_t)(b - a));
            } else {
                w = escape(w, a, b);
            }
            if (p->mode == QUOTED) *w++ = '"';
            o->len = (size_t)(w - o->buf);
        }
    }
    return 0;
}

static PyObject *join(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *pieces;
    if (!PyArg_ParseTuple(args, "nO", &n, &pieces)) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "join: %zd rows", n);
    program g = {0};
    if (program_get(pieces, n, &g, 0) < 0) {
        program_free(&g);
        return NULL;
    }
    size_t guess = 1 << 16;
    for (Py_ssize_t i = 0; i < g.count; i++) {
        const piece *p = &g.p[i];
        guess += p->kind == COLUMN ? (size_t)(p->s.o[n] - p->s.o[0]) + 2 * (size_t)n : (size_t)p->text.len * (size_t)n;
    }
    guess += guess / 8; /* escapes: a stats string gains about 5 % */
    out_buffer o = {NULL, 0, 0};
    o.buf = buffer_take(guess, &o.cap);
    int rc = o.buf ? 0 : -1;
    Py_BEGIN_ALLOW_THREADS for (Py_ssize_t r = 0; rc == 0 && r < n; r++) rc = write_row(&g, 0, g.count, r, &o);
    Py_END_ALLOW_THREADS
    program_free(&g);
    if (rc) {
        buffer_drop(o.buf, o.cap);
        if (rc == -2) return PyErr_Format(PyExc_ValueError, "join: a required value is null");
        return PyErr_NoMemory();
    }
    Lines *l = PyObject_New(Lines, &LinesType);
    if (!l) {
        buffer_drop(o.buf, o.cap);
        return NULL;
    }
    l->buf = o.buf;
    l->cap = o.cap;
    l->len = (Py_ssize_t)o.len;
    return (PyObject *)l;
}

/* ---------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"md5_each", md5_each, METH_VARARGS, "md5_each(data, offsets) -> the MD5 digests of each string, joined."},
    {"mac_each", mac_each, METH_VARARGS,
     "mac_each(data, offsets, key, head, size, encode_eq) -> each string's keyed BLAKE2b of head + string."},
    {"only", only, METH_VARARGS, "only(data, allowed) -> whether every byte of data is in allowed."},
    {"join", join, METH_VARARGS,
     "join(n, pieces) -> Lines: n rows, each the pieces in order. A piece is bytes, a column tuple "
     "(offsets, data, validity, validity_offset, mode, null_as) or a list (written only when none of "
     "its columns without null_as is null)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "The server's per-file loops, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    for (int i = 0; i < 64; i++) MD5_K[i] = (uint32_t)(uint64_t)floor(fabs(sin((double)(i + 1))) * 4294967296.0);
    for (int c = 0; c < 32; c++) NEEDS_ESCAPE[c] = 1;
    NEEDS_ESCAPE['"'] = NEEDS_ESCAPE['\\'] = 1;
    if (PyType_Ready(&LinesType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "RAW", RAW) || PyModule_AddIntConstant(m, "QUOTED", QUOTED)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
