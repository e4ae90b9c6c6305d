/* FastLanes bit-unpacking for Lance 2.1/2.2 pages, in C (and, at the end, the
 * UTF-8 check of decoded strings: utf8_valid).
 *
 * The optional accelerator of tessera.format.encodings.fastlanes: the same
 * decoding as its numpy path (which stays, and is what runs when this module
 * was not built), about ten times faster.  The layout is the one described at
 * the top of fastlanes.py: a block holds 1024 values of T bits packed to W
 * bits, as LANES = 1024 / T interleaved lanes of W words; row r of lane l is
 * the W-bit field at bit r * W of the lane's little-endian bit stream and goes
 * to output index FL_ORDER[r / 8] * 16 + (r % 8) * 128 + l.
 *
 * unpack(words, out, type_bits, bit_width, blocks) reads `blocks` consecutive
 * blocks from the buffer `words` (little-endian T-bit words, read in native
 * order: the caller uses this module on little-endian hosts only);
 * unpack_at(data, starts, bit_widths, out, type_bits) reads one block at each
 * byte offset of `starts`, each of its own width (the blocks of a mini-block
 * page).  Both write 1024 values of T bits per block into the writable buffer
 * `out`, check every size and offset first, and release the GIL while they run.
 *
 * pack(values, out, type_bits, bit_width, blocks) is the writer's inverse of
 * unpack: `blocks` blocks of 1024 T-bit values (each below 2^W: the caller
 * checks) into W words per lane, the words of `out` zeroed first.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static const int FL_ORDER[8] = {0, 4, 2, 6, 1, 5, 3, 7};

/* One block of W-bit values (W >= 1) at `blk` into `o`; loads go through
 * memcpy: a buffer need not be aligned to its word size. */
#define DEFINE_BLOCK(T, TYPE)                                                                \
    static void block_##T(const unsigned char *blk, TYPE *o, int W) {                       \
        const int lanes = 1024 / T;                                                          \
        const TYPE mask = (W == T) ? (TYPE) ~(TYPE)0 : (TYPE)((((uint64_t)1) << W) - 1);     \
        for (int r = 0; r < T; r++) {                                                        \
            const int bit = r * W, k = bit / T, s = bit % T;                                 \
            TYPE *dst = o + FL_ORDER[r / 8] * 16 + (r % 8) * 128;                            \
            const unsigned char *w0 = blk + (size_t)k * lanes * sizeof(TYPE);                \
            if (s + W <= T) {                                                                \
                for (int l = 0; l < lanes; l++) {                                            \
                    TYPE a;                                                                  \
                    memcpy(&a, w0 + (size_t)l * sizeof(TYPE), sizeof(TYPE));                 \
                    dst[l] = (TYPE)((TYPE)(a >> s) & mask);                                  \
                }                                                                            \
            } else {                                                                         \
                const unsigned char *w1 = w0 + (size_t)lanes * sizeof(TYPE);                 \
                for (int l = 0; l < lanes; l++) {                                            \
                    TYPE a, c;                                                               \
                    memcpy(&a, w0 + (size_t)l * sizeof(TYPE), sizeof(TYPE));                 \
                    memcpy(&c, w1 + (size_t)l * sizeof(TYPE), sizeof(TYPE));                 \
                    dst[l] = (TYPE)(((TYPE)(a >> s) | (TYPE)(c << (T - s))) & mask);         \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    static void run_##T(const unsigned char *in, const int64_t *starts, const int64_t *widths, \
                        int W, Py_ssize_t n, void *out_) {                                   \
        TYPE *out = (TYPE *)out_;                                                            \
        for (Py_ssize_t b = 0; b < n; b++) {                                                 \
            const int w = widths ? (int)widths[b] : W;                                       \
            const unsigned char *blk = starts ? in + starts[b] : in + (size_t)b * 128 * (size_t)W; \
            if (w == 0)                                                                      \
                memset(out + (size_t)b * 1024, 0, 1024 * sizeof(TYPE));                      \
            else                                                                             \
                block_##T(blk, out + (size_t)b * 1024, w);                                   \
        }                                                                                    \
    }

DEFINE_BLOCK(8, uint8_t)
DEFINE_BLOCK(16, uint16_t)
DEFINE_BLOCK(32, uint32_t)
DEFINE_BLOCK(64, uint64_t)

static void type_width_error(int type_bits) {
    PyErr_Format(PyExc_ValueError, "FastLanes type width must be 8, 16, 32 or 64, got %d", type_bits);
}

typedef void (*run_fn)(const unsigned char *, const int64_t *, const int64_t *, int, Py_ssize_t, void *);

static run_fn run_for(int type_bits) {
    switch (type_bits) {
        case 8: return run_8;
        case 16: return run_16;
        case 32: return run_32;
        case 64: return run_64;
        default:
            type_width_error(type_bits);
            return NULL;
    }
}

static PyObject *unpack(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer in, out;
    int type_bits, bit_width;
    Py_ssize_t blocks;
    if (!PyArg_ParseTuple(args, "y*w*iin", &in, &out, &type_bits, &bit_width, &blocks)) {
        return NULL;
    }
    PyObject *result = NULL;
    run_fn run = run_for(type_bits);
    if (run == NULL) {
    } else if (bit_width < 1 || bit_width > type_bits) {
        PyErr_Format(PyExc_ValueError, "FastLanes bit width %d is outside 1..%d", bit_width, type_bits);
    } else if (blocks < 0) {
        PyErr_SetString(PyExc_ValueError, "negative FastLanes block count");
    } else if (blocks > PY_SSIZE_T_MAX / (128 * 64) || in.len < blocks * 128 * (Py_ssize_t)bit_width) {
        PyErr_Format(PyExc_ValueError, "FastLanes input of %zd bytes is too short for %zd blocks of %d bits",
                     in.len, blocks, bit_width);
    } else if (out.len < blocks * 1024 * (Py_ssize_t)(type_bits / 8)) {
        PyErr_Format(PyExc_ValueError, "FastLanes output of %zd bytes is too short for %zd blocks", out.len,
                     blocks);
    } else {
        Py_BEGIN_ALLOW_THREADS
        run((const unsigned char *)in.buf, NULL, NULL, bit_width, blocks, out.buf);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *unpack_at(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer in, starts, widths, out;
    int type_bits;
    if (!PyArg_ParseTuple(args, "y*y*y*w*i", &in, &starts, &widths, &out, &type_bits)) {
        return NULL;
    }
    PyObject *result = NULL;
    run_fn run = run_for(type_bits);
    const Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    if (run == NULL) {
    } else if (starts.len % (Py_ssize_t)sizeof(int64_t) || widths.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts and bit widths must be int64 buffers of the same length");
    } else if (out.len < n * 1024 * (Py_ssize_t)(type_bits / 8)) {
        PyErr_Format(PyExc_ValueError, "FastLanes output of %zd bytes is too short for %zd blocks", out.len, n);
    } else {
        int64_t *st = PyMem_Malloc(n ? (size_t)n * sizeof(int64_t) : 1);
        int64_t *wd = PyMem_Malloc(n ? (size_t)n * sizeof(int64_t) : 1);
        if (st == NULL || wd == NULL) {
            PyErr_NoMemory();
        } else {
            memcpy(st, starts.buf, (size_t)n * sizeof(int64_t));  /* unaligned-safe copies */
            memcpy(wd, widths.buf, (size_t)n * sizeof(int64_t));
            Py_ssize_t bad = -1;
            for (Py_ssize_t b = 0; b < n; b++) {
                if (wd[b] < 0 || wd[b] > type_bits || st[b] < 0 || st[b] > in.len ||
                    in.len - st[b] < 128 * wd[b]) {
                    bad = b;
                    break;
                }
            }
            if (bad >= 0) {
                PyErr_Format(PyExc_ValueError,
                             "FastLanes block %zd (%lld bits at byte %lld) runs past the end of a %zd-byte buffer",
                             bad, (long long)wd[bad], (long long)st[bad], in.len);
            } else {
                Py_BEGIN_ALLOW_THREADS
                run((const unsigned char *)in.buf, st, wd, 0, n, out.buf);
                Py_END_ALLOW_THREADS
                result = Py_NewRef(Py_None);
            }
        }
        PyMem_Free(st);
        PyMem_Free(wd);
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&widths);
    PyBuffer_Release(&out);
    return result;
}

/* UTF-8 validation of decoded string data (tessera.format.file.utf8).
 *
 * utf8_valid(data, offsets, offset_bytes, first, n) -> bool: whether values
 * first .. first + n - 1 of a string array (`offsets`: its offsets buffer of
 * 4- or 8-byte little-endian integers, `data`: its value bytes) are each
 * valid UTF-8.  The region [offsets[first], offsets[first + n]) is checked as
 * a whole (16 bytes a step with SSSE3 where the CPU has it: the "lookup"
 * algorithm of Keiser and Lemire, "Validating UTF-8 in less than one
 * instruction per byte", 2021; else byte by byte), then every value is
 * checked to start on a character boundary (not on a 10xxxxxx byte): the
 * cuts of valid UTF-8 at character boundaries are valid UTF-8 (an all-ASCII
 * region needs no such check).  False also when the region lies outside
 * `data`, when an offset lies outside a non-ASCII region, and when bytes under
 * a null slot are not UTF-8: the caller then asks Arrow's per-value check,
 * which decides.  Nothing outside the buffers is read.
 */

static int utf8_scalar(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        const unsigned char c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c < 0xC2) { /* a continuation byte, or an overlong 2-byte lead */
            return 0;
        } else if (c < 0xE0) {
            if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c < 0xF0) {
            if (n - i < 3 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F)) return 0; /* overlong, surrogate */
            i += 3;
        } else if (c < 0xF5) {
            if (n - i < 4 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F)) return 0; /* overlong, > U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define UTF8_SIMD 1
#define U8_SHORT (1 << 0)      /* a lead (or ASCII) byte then a lead or ASCII byte where a continuation is due */
#define U8_LONG (1 << 1)       /* ASCII then a continuation */
#define U8_OVERLONG_3 (1 << 2)
#define U8_TOO_LARGE (1 << 3)
#define U8_SURROGATE (1 << 4)
#define U8_OVERLONG_2 (1 << 5)
#define U8_TOO_LARGE_1000 (1 << 6)
#define U8_OVERLONG_4 (1 << 6)
#define U8_TWO_CONTS (1 << 7)
#define U8_CARRY (U8_SHORT | U8_LONG | U8_TWO_CONTS)
#define U8_BIG (U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000)

__attribute__((target("ssse3"))) static int utf8_ssse3(const unsigned char *s, size_t n, int *ascii) {
    /* what the high nibble of a byte, its low nibble, and the high nibble of
       the byte after it allow; a pair is wrong where all three agree */
    const __m128i byte1_high = _mm_setr_epi8(
        U8_LONG, U8_LONG, U8_LONG, U8_LONG, U8_LONG, U8_LONG, U8_LONG, U8_LONG,
        (char)U8_TWO_CONTS, (char)U8_TWO_CONTS, (char)U8_TWO_CONTS, (char)U8_TWO_CONTS,
        U8_SHORT | U8_OVERLONG_2, U8_SHORT, U8_SHORT | U8_OVERLONG_3 | U8_SURROGATE,
        U8_SHORT | U8_TOO_LARGE | U8_TOO_LARGE_1000 | U8_OVERLONG_4);
    const __m128i byte1_low = _mm_setr_epi8(
        (char)(U8_CARRY | U8_OVERLONG_3 | U8_OVERLONG_2 | U8_OVERLONG_4), (char)(U8_CARRY | U8_OVERLONG_2),
        (char)U8_CARRY, (char)U8_CARRY, (char)(U8_CARRY | U8_TOO_LARGE), (char)U8_BIG, (char)U8_BIG, (char)U8_BIG,
        (char)U8_BIG, (char)U8_BIG, (char)U8_BIG, (char)U8_BIG, (char)U8_BIG, (char)(U8_BIG | U8_SURROGATE),
        (char)U8_BIG, (char)U8_BIG);
    const __m128i byte2_high = _mm_setr_epi8(
        U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT,
        (char)(U8_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_OVERLONG_3 | U8_TOO_LARGE_1000 | U8_OVERLONG_4),
        (char)(U8_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_OVERLONG_3 | U8_TOO_LARGE),
        (char)(U8_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_SURROGATE | U8_TOO_LARGE),
        (char)(U8_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_SURROGATE | U8_TOO_LARGE),
        U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT);
    const __m128i nibble = _mm_set1_epi8(0x0F);
    /* a block ending in the first bytes of a character: the next must go on with it */
    const __m128i incomplete_at = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                (char)(0xF0 - 1), (char)(0xE0 - 1), (char)(0xC0 - 1));
    __m128i error = _mm_setzero_si128(), prev = _mm_setzero_si128(), prev_incomplete = _mm_setzero_si128();
    __m128i high = _mm_setzero_si128();
    unsigned char last[16];
    size_t i = 0;
    while (i < n) {
        if (n - i >= 64) { /* 64 ASCII bytes at once */
            const __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
            const __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
            const __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
            const __m128i d = _mm_loadu_si128((const __m128i *)(s + i + 48));
            if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d))) == 0) {
                error = _mm_or_si128(error, prev_incomplete);
                prev_incomplete = _mm_setzero_si128();
                prev = d;
                i += 64;
                continue;
            }
        }
        __m128i in;
        if (n - i >= 16) {
            in = _mm_loadu_si128((const __m128i *)(s + i));
        } else { /* the last bytes, padded with ASCII */
            memset(last, 0, sizeof last);
            memcpy(last, s + i, n - i);
            in = _mm_loadu_si128((const __m128i *)last);
        }
        if (_mm_movemask_epi8(in) == 0) {
            error = _mm_or_si128(error, prev_incomplete);
            prev_incomplete = _mm_setzero_si128();
        } else {
            high = in;
            const __m128i prev1 = _mm_alignr_epi8(in, prev, 15);
            const __m128i h1 = _mm_shuffle_epi8(byte1_high, _mm_and_si128(_mm_srli_epi16(prev1, 4), nibble));
            const __m128i l1 = _mm_shuffle_epi8(byte1_low, _mm_and_si128(prev1, nibble));
            const __m128i h2 = _mm_shuffle_epi8(byte2_high, _mm_and_si128(_mm_srli_epi16(in, 4), nibble));
            const __m128i special = _mm_and_si128(_mm_and_si128(h1, l1), h2);
            const __m128i third = _mm_subs_epu8(_mm_alignr_epi8(in, prev, 14), _mm_set1_epi8((char)(0xE0 - 0x80)));
            const __m128i fourth = _mm_subs_epu8(_mm_alignr_epi8(in, prev, 13), _mm_set1_epi8((char)(0xF0 - 0x80)));
            const __m128i must23 = _mm_and_si128(_mm_or_si128(third, fourth), _mm_set1_epi8((char)0x80));
            error = _mm_or_si128(error, _mm_xor_si128(must23, special));
            prev_incomplete = _mm_subs_epu8(in, incomplete_at);
        }
        prev = in;
        i += 16;
    }
    error = _mm_or_si128(error, prev_incomplete);
    *ascii = _mm_movemask_epi8(high) == 0;
    return _mm_movemask_epi8(_mm_cmpeq_epi8(error, _mm_setzero_si128())) == 0xFFFF;
}
#endif

/* Whether s[0..n) is valid UTF-8; *ascii says whether it was all ASCII (then
   every cut of it is a character boundary). */
static int utf8_region(const unsigned char *s, size_t n, int *ascii) {
    *ascii = 0;
#ifdef UTF8_SIMD
    static int simd = -1;
    if (simd < 0) simd = __builtin_cpu_supports("ssse3") ? 1 : 0;
    if (simd) return utf8_ssse3(s, n, ascii);
#endif
    return utf8_scalar(s, n);
}

static inline int64_t offset_at(const unsigned char *o, int width, Py_ssize_t i) {
    if (width == 4) {
        int32_t v;
        memcpy(&v, o + (size_t)i * 4, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, o + (size_t)i * 8, 8);
    return v;
}

static PyObject *utf8_valid(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data, offsets;
    int width;
    Py_ssize_t first, n;
    if (!PyArg_ParseTuple(args, "y*y*inn", &data, &offsets, &width, &first, &n)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (width != 4 && width != 8) {
        PyErr_Format(PyExc_ValueError, "string offsets must be 4 or 8 bytes wide, got %d", width);
    } else if (first < 0 || n < 0 || first > PY_SSIZE_T_MAX / 8 - n - 1 ||
               offsets.len < (first + n + 1) * (Py_ssize_t)width) {
        PyErr_Format(PyExc_ValueError, "an offsets buffer of %zd bytes does not hold offsets %zd..%zd", offsets.len,
                     first, first + n);
    } else {
        int ok = 1;
        const unsigned char *o = (const unsigned char *)offsets.buf, *d = (const unsigned char *)data.buf;
        Py_BEGIN_ALLOW_THREADS
        const int64_t lo = offset_at(o, width, first), hi = offset_at(o, width, first + n);
        if (lo < 0 || hi < lo || hi > (int64_t)data.len) {
            ok = 0;
        } else {
            int ascii;
            ok = utf8_region(d + lo, (size_t)(hi - lo), &ascii);
            /* ASCII: every cut is a boundary, and no byte at an offset is read */
            for (Py_ssize_t i = first + 1; ok && !ascii && i < first + n; i++) {
                const int64_t at = offset_at(o, width, i);
                if (at < lo || at > hi)
                    ok = 0;
                else if (at < hi && (d[at] & 0xC0) == 0x80)
                    ok = 0;
            }
        }
        Py_END_ALLOW_THREADS
        result = PyBool_FromLong(ok);
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&offsets);
    return result;
}

/* The inverse of block_T: 1024 values at `v` into the W * LANES words at `blk`. */
#define DEFINE_PACK(T, TYPE)                                                                 \
    static void pack_block_##T(const TYPE *v, unsigned char *blk, int W) {                    \
        const int lanes = 1024 / T;                                                          \
        memset(blk, 0, (size_t)W * lanes * sizeof(TYPE));                                    \
        for (int r = 0; r < T; r++) {                                                        \
            const int bit = r * W, k = bit / T, s = bit % T;                                 \
            const TYPE *src = v + FL_ORDER[r / 8] * 16 + (r % 8) * 128;                      \
            unsigned char *w0 = blk + (size_t)k * lanes * sizeof(TYPE);                      \
            for (int l = 0; l < lanes; l++) {                                                \
                TYPE a;                                                                      \
                memcpy(&a, w0 + (size_t)l * sizeof(TYPE), sizeof(TYPE));                     \
                a = (TYPE)(a | (TYPE)(src[l] << s));                                         \
                memcpy(w0 + (size_t)l * sizeof(TYPE), &a, sizeof(TYPE));                     \
            }                                                                                \
            if (s + W > T) {                                                                 \
                unsigned char *w1 = w0 + (size_t)lanes * sizeof(TYPE);                       \
                for (int l = 0; l < lanes; l++) {                                            \
                    TYPE c;                                                                  \
                    memcpy(&c, w1 + (size_t)l * sizeof(TYPE), sizeof(TYPE));                 \
                    c = (TYPE)(c | (TYPE)(src[l] >> (T - s)));                               \
                    memcpy(w1 + (size_t)l * sizeof(TYPE), &c, sizeof(TYPE));                 \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    static void pack_run_##T(const void *in, unsigned char *out, int W, Py_ssize_t n) {      \
        for (Py_ssize_t b = 0; b < n; b++)                                                   \
            pack_block_##T((const TYPE *)in + (size_t)b * 1024, out + (size_t)b * 128 * (size_t)W, W); \
    }

DEFINE_PACK(8, uint8_t)
DEFINE_PACK(16, uint16_t)
DEFINE_PACK(32, uint32_t)
DEFINE_PACK(64, uint64_t)

typedef void (*pack_fn)(const void *, unsigned char *, int, Py_ssize_t);

static pack_fn pack_for(int type_bits) {
    switch (type_bits) {
        case 8: return pack_run_8;
        case 16: return pack_run_16;
        case 32: return pack_run_32;
        case 64: return pack_run_64;
        default:
            type_width_error(type_bits);
            return NULL;
    }
}

static PyObject *pack(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer in, out;
    int type_bits, bit_width;
    Py_ssize_t blocks;
    if (!PyArg_ParseTuple(args, "y*w*iin", &in, &out, &type_bits, &bit_width, &blocks)) {
        return NULL;
    }
    PyObject *result = NULL;
    pack_fn run = pack_for(type_bits);
    if (run == NULL) {
    } else if (bit_width < 1 || bit_width > type_bits) {
        PyErr_Format(PyExc_ValueError, "FastLanes bit width %d is outside 1..%d", bit_width, type_bits);
    } else if (blocks < 0 || blocks > PY_SSIZE_T_MAX / (128 * 64)) {
        PyErr_SetString(PyExc_ValueError, "bad FastLanes block count");
    } else if (in.len < blocks * 1024 * (Py_ssize_t)(type_bits / 8)) {
        PyErr_Format(PyExc_ValueError, "FastLanes input of %zd bytes is too short for %zd blocks", in.len, blocks);
    } else if ((uintptr_t)in.buf % (uintptr_t)(type_bits / 8)) {
        PyErr_SetString(PyExc_ValueError, "FastLanes values to pack must be aligned to their width");
    } else if (out.len < blocks * 128 * (Py_ssize_t)bit_width) {
        PyErr_Format(PyExc_ValueError, "FastLanes output of %zd bytes is too short for %zd blocks of %d bits",
                     out.len, blocks, bit_width);
    } else {
        Py_BEGIN_ALLOW_THREADS
        run(in.buf, (unsigned char *)out.buf, bit_width, blocks);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"unpack", unpack, METH_VARARGS,
     "unpack(words, out, type_bits, bit_width, blocks): decode consecutive FastLanes blocks into out."},
    {"unpack_at", unpack_at, METH_VARARGS,
     "unpack_at(data, starts, bit_widths, out, type_bits): decode the block at each byte offset of starts\n"
     "(int64), of the bit width at the same index of bit_widths (int64; 0: zeros), into out."},
    {"pack", pack, METH_VARARGS,
     "pack(values, out, type_bits, bit_width, blocks): encode consecutive blocks of 1024 values (each below\n"
     "2**bit_width) as FastLanes blocks into out."},
    {"utf8_valid", utf8_valid, METH_VARARGS,
     "utf8_valid(data, offsets, offset_bytes, first, n): whether string values first..first+n-1 are valid UTF-8\n"
     "(False also for offsets out of place: ask Arrow then)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastlanes", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastlanes(void) { return PyModule_Create(&module); }
