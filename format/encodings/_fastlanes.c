/* FastLanes bit-unpacking for Lance 2.1/2.2 pages, in C.
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

typedef void (*run_fn)(const unsigned char *, const int64_t *, const int64_t *, int, Py_ssize_t, void *);

static run_fn run_for(int type_bits) {
    switch (type_bits) {
        case 8: return run_8;
        case 16: return run_16;
        case 32: return run_32;
        case 64: return run_64;
        default:
            PyErr_Format(PyExc_ValueError, "FastLanes type width must be 8, 16, 32 or 64, got %d", type_bits);
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

static PyMethodDef methods[] = {
    {"unpack", unpack, METH_VARARGS,
     "unpack(words, out, type_bits, bit_width, blocks): decode consecutive FastLanes blocks into out."},
    {"unpack_at", unpack_at, METH_VARARGS,
     "unpack_at(data, starts, bit_widths, out, type_bits): decode the block at each byte offset of starts\n"
     "(int64), of the bit width at the same index of bit_widths (int64; 0: zeros), into out."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastlanes", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastlanes(void) { return PyModule_Create(&module); }
