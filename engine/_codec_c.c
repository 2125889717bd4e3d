/* engine._codec_c: the engine's per-message byte codecs in C: the file store's MSG record
 * encoder (engine/records.py) and the message walk of publish and batch entries
 * (engine/entries.py), which every replica runs on every message it applies.
 *
 * Why C: encoding a record is the largest single cost of storing a message on every replica.
 * The Python form, compiled with mypyc, still builds five temporary objects per record (two
 * packed structs, the joined record, the packed CRC, the encoded subject) and takes about
 * 570 ns; this one writes the record straight into the store's buffer in about 230 ns.
 *
 * The bytes are exactly those of records.py's ``_append_msg_fields_py`` (a property test holds
 * the two equal, and the golden log test pins the format); the build falls back to that function
 * when this module is not compiled. Layout (little-endian), see engine/records.py:
 *
 *   total_len u32 | version u8 | type u8 | reserved u16 | seq u64 | header_crc u32
 *   ts_ns i64 | subject_len u16 | hdr_len u32 | subject | hdr | data | crc u32
 *
 * For a StoredMsg as the store builds one (int seq and ts_ns in range, a str subject, bytes
 * header and data) it refuses what the Python encoder refuses (an empty or over-long subject, a
 * record over 4 GiB: AssertionError) and writes the same bytes otherwise. Other ill-typed input
 * is refused too, not always with the exception type the Python form would raise (an
 * out-of-range seq: OverflowError here, struct.error there).
 *
 * The CRC-32 is zlib-ng's when the zlib_ng package's extension exports it (see find_zlib_ng),
 * else zlib's: the same values.
 *
 * ``decode_msg_at`` is the file store's per-read decoder (records.py's ``decode_msg_record``).
 *
 * Also ``set_untracked``, which keeps the messages a store holds away from the cycle collector.
 *
 * Must never: write anything but a whole record (every check happens before the buffer grows),
 * or store a message the Python encoder would refuse.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define RECORD_VERSION 1
#define TYPE_MSG 1
#define HEAD_BYTES 16           /* total_len .. seq: what header_crc covers */
#define HEADER_BYTES 20         /* with header_crc */
#define MSG_FIXED_BYTES 14      /* ts_ns, subject_len, hdr_len */
#define CRC_BYTES 4
#define MSG_OVERHEAD_BYTES (HEADER_BYTES + MSG_FIXED_BYTES + CRC_BYTES)
#define SUBJECT_BYTES_MAX 0xFFFF
#define RECORD_BYTES_MAX 0xFFFFFFFFULL
#define STORED_MSG_FIELDS 5     /* StoredMsg: seq, subject, hdr, data, ts_ns */

static void put_u16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* zlib-ng's CRC-32 (the same values as zlib's, two to three times faster on a record), as the
 * zlib-ng Python package (a pinned dependency, engine/checksum.py's CRC) exports it from its
 * extension module; found at import (find_zlib_ng), else NULL and zlib's is used. */
typedef uint32_t (*crc32_fn)(uint32_t crc, const uint8_t *buf, size_t len); /* zng_crc32_z */
static crc32_fn zng_crc32_fn = NULL;

/* The CRC-32 of p[0:n] continued from ``start`` (0 for a fresh one). zng_crc32_z takes a size_t
 * length; zlib's crc32 a uInt: fed in pieces so that more than 4 GiB cannot wrap. */
static uint32_t crc_continue(uint32_t start, const unsigned char *p, size_t n) {
    if (zng_crc32_fn != NULL) return zng_crc32_fn(start, p, n);
    uLong crc = start;
    while (n > 0) {
        uInt piece = n > 0x40000000u ? 0x40000000u : (uInt)n;
        crc = crc32(crc, p, piece);
        p += piece;
        n -= piece;
    }
    return (uint32_t)crc;
}

static uint32_t crc_of(const unsigned char *p, size_t n) { return crc_continue(0, p, n); }

/* A subject's UTF-8: a str's own data when it is ASCII (*encoded set to NULL), else encoded
 * into a new bytes the caller releases (*encoded). The parser hands on a client's non-UTF-8
 * bytes as lone surrogates: surrogatepass makes them round-trip. NULL on error. */
static const char *subject_utf8(PyObject *subject, Py_ssize_t *len, PyObject **encoded) {
    *encoded = NULL;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_Check(subject) && PyUnicode_READY(subject) < 0) return NULL;
#endif
    if (PyUnicode_Check(subject) && PyUnicode_IS_ASCII(subject)) {
        *len = PyUnicode_GET_LENGTH(subject);
        return (const char *)PyUnicode_DATA(subject);
    }
    *encoded = PyUnicode_AsEncodedString(subject, "utf-8", "surrogatepass");
    if (*encoded == NULL) return NULL;
    *len = PyBytes_GET_SIZE(*encoded);
    return PyBytes_AS_STRING(*encoded);
}

/* append_msg_fields(buf: bytearray, seq, subject, hdr, data, ts_ns) -> int: the MSG record of
 * those StoredMsg fields appended to buf; the record's length in bytes. Fields, not a StoredMsg:
 * building the tuple only to encode it cost more than the encoding's own work. */
static PyObject *append_msg_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 + STORED_MSG_FIELDS - 1) {
        PyErr_SetString(PyExc_TypeError,
                        "append_msg_fields(buf, seq, subject, hdr, data, ts_ns) takes 6 arguments");
        return NULL;
    }
    PyObject *buf = args[0];
    if (!PyByteArray_Check(buf)) {
        PyErr_SetString(PyExc_TypeError, "append_msg_fields: buf must be a bytearray");
        return NULL;
    }
    uint64_t seq = PyLong_AsUnsignedLongLong(args[1]);
    if (seq == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    long long ts_ns = PyLong_AsLongLong(args[5]);
    if (ts_ns == -1 && PyErr_Occurred()) return NULL;

    PyObject *encoded;  /* owned: the subject's UTF-8 bytes when it is not ASCII */
    Py_ssize_t subject_len;
    const char *subject_p = subject_utf8(args[2], &subject_len, &encoded);
    if (subject_p == NULL) return NULL;

    /* bytes only, as the compiled Python encoder: a mutable buffer is refused before anything
       is written (a stored message must not share a caller's bytearray) */
    PyObject *hdr = args[3], *data = args[4];
    if (!PyBytes_Check(hdr) || !PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "append_msg_fields: hdr and data must be bytes");
        Py_XDECREF(encoded);
        return NULL;
    }
    Py_ssize_t hdr_len = PyBytes_GET_SIZE(hdr), data_len = PyBytes_GET_SIZE(data);
    PyObject *result = NULL;
    /* the same refusals as the Python encoder's assertions, before anything is written */
    unsigned long long total_len = (unsigned long long)MSG_OVERHEAD_BYTES +
                                   (unsigned long long)subject_len + (unsigned long long)hdr_len +
                                   (unsigned long long)data_len;
    if (subject_len <= 0 || subject_len > SUBJECT_BYTES_MAX) {
        PyErr_Format(PyExc_AssertionError, "%zd", subject_len);
        goto done;
    }
    if (total_len > RECORD_BYTES_MAX) {
        PyErr_Format(PyExc_AssertionError, "%llu", total_len);
        goto done;
    }
    Py_ssize_t start = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, start + (Py_ssize_t)total_len) < 0) goto done;
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(buf) + start;
    put_u32(p, (uint32_t)total_len);
    p[4] = RECORD_VERSION;
    p[5] = TYPE_MSG;
    put_u16(p + 6, 0);
    put_u64(p + 8, seq);
    put_u32(p + HEAD_BYTES, crc_of(p, HEAD_BYTES));
    unsigned char *q = p + HEADER_BYTES;
    put_u64(q, (uint64_t)ts_ns);
    put_u16(q + 8, (uint16_t)subject_len);
    put_u32(q + 10, (uint32_t)hdr_len);
    q += MSG_FIXED_BYTES;
    memcpy(q, subject_p, (size_t)subject_len);
    q += subject_len;
    memcpy(q, PyBytes_AS_STRING(hdr), (size_t)hdr_len);
    q += hdr_len;
    memcpy(q, PyBytes_AS_STRING(data), (size_t)data_len);
    q += data_len;
    put_u32(q, crc_of(p, (size_t)(total_len - CRC_BYTES)));
    result = PyLong_FromUnsignedLongLong(total_len);
done:
    Py_XDECREF(encoded);
    return result;
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t get_u64(const unsigned char *p) {
    return (uint64_t)get_u32(p) | ((uint64_t)get_u32(p + 4) << 32);
}

/* decode_msg_at(buf, offset, length, seq, cls) -> cls | None: the message of ``seq`` in the MSG
 * record that is exactly buf[offset:offset+length] (bytes or bytearray), built as ``cls`` (the
 * StoredMsg class: a tuple subclass without fields of its own), or None when those bytes are not
 * an intact MSG record of that seq and length: records.py's ``decode_msg_record`` without the
 * slice, the nine-field unpack and its temporaries (about 1 us there, a fifth of that here).
 * The checks are the Python form's: length, total_len, seq, type, version, layout, then the
 * CRC of the whole record (the stored one must match); the subject decodes as the encoder
 * encoded it (surrogatepass). A range outside buf is None, as a short read is there. A seq,
 * offset or length that is not a Python int within C's range raises (OverflowError, TypeError)
 * where the Python form answers None: the file store passes only its own in-range values. */
static PyObject *decode_msg_at(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_msg_at(buf, offset, length, seq, cls) takes 5 arguments");
        return NULL;
    }
    PyObject *cls = args[4];
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "decode_msg_at: cls must be a tuple subclass");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t length = PyLong_AsSsize_t(args[2]);
    if (length == -1 && PyErr_Occurred()) return NULL;
    uint64_t seq = PyLong_AsUnsignedLongLong(args[3]);
    if (seq == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL, *subject = NULL, *hdr = NULL, *data = NULL;
    if (offset < 0 || length < HEADER_BYTES + MSG_FIXED_BYTES + CRC_BYTES ||
        offset > view.len || length > view.len - offset)
        goto none;
    const unsigned char *p = (const unsigned char *)view.buf + offset;
    uint32_t subject_len = (uint32_t)p[HEADER_BYTES + 8] | ((uint32_t)p[HEADER_BYTES + 9] << 8);
    uint32_t hdr_len = get_u32(p + HEADER_BYTES + 10);
    size_t end = (size_t)length - CRC_BYTES;
    size_t hdr_start = HEADER_BYTES + MSG_FIXED_BYTES + (size_t)subject_len;
    size_t data_start = hdr_start + (size_t)hdr_len;
    if (get_u32(p) != (uint64_t)length || get_u64(p + 8) != seq || p[5] != TYPE_MSG ||
        p[4] != RECORD_VERSION || data_start > end || crc_of(p, end) != get_u32(p + end))
        goto none;
    long long ts_ns = (long long)get_u64(p + HEADER_BYTES);
    subject = PyUnicode_DecodeUTF8((const char *)p + HEADER_BYTES + MSG_FIXED_BYTES,
                                   (Py_ssize_t)subject_len, "surrogatepass");
    if (subject == NULL) goto done;
    hdr = PyBytes_FromStringAndSize((const char *)p + hdr_start, (Py_ssize_t)hdr_len);
    if (hdr == NULL) goto done;
    data = PyBytes_FromStringAndSize((const char *)p + data_start, (Py_ssize_t)(end - data_start));
    if (data == NULL) goto done;
    PyObject *seq_obj = PyLong_FromUnsignedLongLong(seq);
    if (seq_obj == NULL) goto done;
    PyObject *ts_obj = PyLong_FromLongLong(ts_ns);
    if (ts_obj == NULL) {
        Py_DECREF(seq_obj);
        goto done;
    }
    result = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, STORED_MSG_FIELDS);
    if (result == NULL) {
        Py_DECREF(seq_obj);
        Py_DECREF(ts_obj);
        goto done;
    }
    PyTuple_SET_ITEM(result, 0, seq_obj);
    PyTuple_SET_ITEM(result, 1, subject);
    PyTuple_SET_ITEM(result, 2, hdr);
    PyTuple_SET_ITEM(result, 3, data);
    PyTuple_SET_ITEM(result, 4, ts_obj);
    subject = hdr = data = NULL; /* the tuple owns them */
    goto done;
none:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(subject);
    Py_XDECREF(hdr);
    Py_XDECREF(data);
    PyBuffer_Release(&view);
    return result;
}

static uint32_t get_u32be(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put_u32be(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}

#define MSG_LENS_BYTES 12 /* subject, hdr, data lengths: u32 big-endian each */

/* decode_msgs(buf: bytes, pos: int, end: int, count: int, make) -> (list, next_pos):
 * entries.py's _dec_inbound_msgs_py walk: count messages from pos, none past end, each built
 * as make(subject, hdr, data). Raises ValueError("entry truncated") past end, and the
 * UnicodeDecodeError of a subject that is not UTF-8 (surrogatepass), as the Python walk does. */
static PyObject *decode_msgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_msgs(buf: bytes, pos, end, count, make)");
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    if (end == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    PyObject *make = args[4];
    if (pos < 0 || end < pos || end > PyBytes_GET_SIZE(args[0]) || count < 0) {
        PyErr_SetString(PyExc_ValueError, "decode_msgs: bad bounds");
        return NULL;
    }
    /* each message takes at least MSG_LENS_BYTES: a count beyond that is truncated anyway, and
       the list is not allocated for it */
    PyObject *msgs = PyList_New(0);
    if (msgs == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (end - pos < MSG_LENS_BYTES) goto truncated;
        uint64_t subject_len = get_u32be(buf + pos), hdr_len = get_u32be(buf + pos + 4),
                 data_len = get_u32be(buf + pos + 8);
        Py_ssize_t subject_at = pos + MSG_LENS_BYTES;
        if ((uint64_t)(end - subject_at) < subject_len + hdr_len + data_len) goto truncated;
        Py_ssize_t hdr_at = subject_at + (Py_ssize_t)subject_len;
        Py_ssize_t data_at = hdr_at + (Py_ssize_t)hdr_len;
        pos = data_at + (Py_ssize_t)data_len;
        PyObject *subject =
            PyUnicode_DecodeUTF8((const char *)buf + subject_at, (Py_ssize_t)subject_len,
                                 "surrogatepass");
        if (subject == NULL) goto fail;
        PyObject *hdr = PyBytes_FromStringAndSize((const char *)buf + hdr_at, (Py_ssize_t)hdr_len);
        PyObject *data =
            PyBytes_FromStringAndSize((const char *)buf + data_at, (Py_ssize_t)data_len);
        PyObject *msg = NULL;
        if (hdr != NULL && data != NULL) {
            PyObject *make_args[3] = {subject, hdr, data};
            msg = PyObject_Vectorcall(make, make_args, 3, NULL);
        }
        Py_DECREF(subject);
        Py_XDECREF(hdr);
        Py_XDECREF(data);
        if (msg == NULL) goto fail;
        int appended = PyList_Append(msgs, msg);
        Py_DECREF(msg);
        if (appended < 0) goto fail;
    }
    PyObject *next = PyLong_FromSsize_t(pos);
    if (next == NULL) goto fail;
    PyObject *result = PyTuple_Pack(2, msgs, next);
    Py_DECREF(msgs);
    Py_DECREF(next);
    return result;
truncated:
    PyErr_SetString(PyExc_ValueError, "entry truncated");
fail:
    Py_DECREF(msgs);
    return NULL;
}

/* encode_msgs(msgs) -> bytes: entries.py's _enc_inbound_msgs_py run of messages, joined: per
 * message its subject, header and data lengths (u32 big-endian each), then the UTF-8 subject
 * (surrogatepass), the header and the data. The leader encodes every message of every entry it
 * proposes: the compiled Python form built three temporary objects per message (about 400 ns).
 * A length over 2^32-1 raises OverflowError (struct.error there); a field of the wrong type
 * raises TypeError. */
static PyObject *attr_subject = NULL, *attr_hdr = NULL, *attr_data = NULL;

/* One message of encode_msgs: what keeps its three fields alive, and their bytes. */
typedef struct {
    PyObject *keep[3]; /* the subject str (ASCII) or its encoded bytes, the hdr, the data */
    const char *bytes[3];
    Py_ssize_t len[3];
} msg_fields;

static PyObject *encode_msgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "encode_msgs(msgs) takes 1 argument");
        return NULL;
    }
    /* a tuple (a list is copied: a property read below could otherwise change it under us) */
    PyObject *seq = PySequence_Tuple(args[0]);
    if (seq == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(seq);
    msg_fields *fields = PyMem_Calloc((size_t)(count ? count : 1), sizeof(msg_fields));
    PyObject *result = NULL;
    if (fields == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        msg_fields *f = fields + i;
        PyObject *item = PyTuple_GET_ITEM(seq, i);
        PyObject *subject = PyObject_GetAttr(item, attr_subject);
        if (subject == NULL) goto done;
        if (!PyUnicode_Check(subject)) {
            Py_DECREF(subject);
            PyErr_SetString(PyExc_TypeError, "encode_msgs: a subject is not a str");
            goto done;
        }
        PyObject *encoded;
        f->bytes[0] = subject_utf8(subject, &f->len[0], &encoded);
        if (encoded != NULL) { /* keep the UTF-8 bytes rather than the str */
            Py_DECREF(subject);
            subject = encoded;
        }
        f->keep[0] = subject; /* released below, also when subject_utf8 failed */
        if (f->bytes[0] == NULL) goto done;
        f->keep[1] = PyObject_GetAttr(item, attr_hdr);
        if (f->keep[1] == NULL) goto done;
        f->keep[2] = PyObject_GetAttr(item, attr_data);
        if (f->keep[2] == NULL) goto done;
        if (!PyBytes_Check(f->keep[1]) || !PyBytes_Check(f->keep[2])) {
            PyErr_SetString(PyExc_TypeError, "encode_msgs: a header or data is not bytes");
            goto done;
        }
        for (int k = 1; k < 3; k++) {
            f->bytes[k] = PyBytes_AS_STRING(f->keep[k]);
            f->len[k] = PyBytes_GET_SIZE(f->keep[k]);
        }
        for (int k = 0; k < 3; k++) {
            if ((uint64_t)f->len[k] > UINT32_MAX ||
                total > PY_SSIZE_T_MAX - MSG_LENS_BYTES - f->len[k]) {
                PyErr_SetString(PyExc_OverflowError, "encode_msgs: a field is too long");
                goto done;
            }
            total += f->len[k];
        }
        total += MSG_LENS_BYTES;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < count; i++) {
        const msg_fields *f = fields + i;
        for (int k = 0; k < 3; k++) put_u32be(out + 4 * k, (uint32_t)f->len[k]);
        out += MSG_LENS_BYTES;
        for (int k = 0; k < 3; k++) {
            memcpy(out, f->bytes[k], (size_t)f->len[k]);
            out += f->len[k];
        }
    }
done:
    if (fields != NULL) {
        for (Py_ssize_t i = 0; i < count; i++)
            for (int k = 0; k < 3; k++) Py_XDECREF(fields[i].keep[k]);
        PyMem_Free(fields);
    }
    Py_DECREF(seq);
    return result;
}

/* An object the cycle collector can skip: exact str, bytes, int, float, bool or None. */
static int is_atomic(PyObject *o) {
    return o == Py_None || PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) || PyLong_CheckExact(o) ||
           PyBool_Check(o) || PyFloat_CheckExact(o);
}

static PyTypeObject *untrackable_subclass = NULL; /* the last one found below (a strong ref) */

/* A tuple, or a class defined in Python directly on tuple with no __dict__ (a NamedTuple such
 * as StoredMsg): their references are their items. Not a struct sequence (time.struct_time and
 * the like keep fields beyond their items). An untracked instance of a class no longer shows the
 * collector its reference to the class: fine for classes that live as long as the process. */
static int untrackable_type(PyTypeObject *type) {
    if (type == &PyTuple_Type || type == untrackable_subclass) return 1;
    if (!PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE) || type->tp_base != &PyTuple_Type ||
        type->tp_dictoffset != 0 || type->tp_dict == NULL)
        return 0;
    PyObject *fields = PyDict_GetItemString(type->tp_dict, "n_fields"); /* borrowed, no error */
    if (fields != NULL) return 0;
    Py_INCREF(type);
    Py_XSETREF(untrackable_subclass, type);
    return 1;
}

/* set_untracked(mapping, key, value): ``mapping[key] = value``, and a value that is a tuple, or
 * an instance of a NamedTuple-like class (see untrackable_type), whose items are all atomic is
 * first taken off the cycle collector's lists: it cannot be part of a reference cycle. CPython
 * does the same for a plain tuple, but only at its first collection and never for a subclass, so
 * each message kept by the read cache or the memory store was traversed by
 * collections while it lived. (A function that returned the value untracked would not do: the
 * compiled callers rebuild a typed tuple when they store it.) */
static PyObject *set_untracked(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "set_untracked(mapping, key, value) takes 3 arguments");
        return NULL;
    }
    PyObject *value = args[2];
    if (PyTuple_Check(value) && PyObject_GC_IsTracked(value) && untrackable_type(Py_TYPE(value))) {
        Py_ssize_t n = PyTuple_GET_SIZE(value);
        Py_ssize_t i = 0;
        while (i < n && is_atomic(PyTuple_GET_ITEM(value, i))) i++;
        if (i == n) PyObject_GC_UnTrack(value);
    }
    if (PyObject_SetItem(args[0], args[1], value) < 0) return NULL;
    Py_RETURN_NONE;
}

/* content_fingerprint(hdr, data) -> int: engine/digest.py's content fingerprint, the CRC-32 of
 * header and payload with the header's length above it; bytes-like arguments. */
#define FINGERPRINT_HDR_LEN_SHIFT 32 /* digest.py's; the property test holds the two forms equal */
static PyObject *content_fingerprint(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "content_fingerprint(hdr, data) takes 2 arguments");
        return NULL;
    }
    Py_buffer hdr, data;
    if (PyObject_GetBuffer(args[0], &hdr, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&hdr);
        return NULL;
    }
    /* an empty header adds nothing to the CRC: crc_of(b"") is 0, where the data's CRC starts */
    uint32_t crc = crc_continue(crc_of((const unsigned char *)hdr.buf, (size_t)hdr.len),
                                (const unsigned char *)data.buf, (size_t)data.len);
    unsigned long long value = crc;
    if (hdr.len > 0) value |= (unsigned long long)hdr.len << FINGERPRINT_HDR_LEN_SHIFT;
    PyBuffer_Release(&hdr);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLongLong(value);
}

/* crc_source() -> str: whose CRC-32 the encoder uses ("zlib-ng" or "zlib"), for tests. */
static PyObject *crc_source(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyUnicode_FromString(zng_crc32_fn != NULL ? "zlib-ng" : "zlib");
}

static PyMethodDef methods[] = {
    {"append_msg_fields", (PyCFunction)(void (*)(void))append_msg_fields, METH_FASTCALL,
     "append_msg_fields(buf, seq, subject, hdr, data, ts_ns) -> int: append their MSG record to "
     "buf; its length in bytes."},
    {"decode_msg_at", (PyCFunction)(void (*)(void))decode_msg_at, METH_FASTCALL,
     "decode_msg_at(buf, offset, length, seq, cls) -> cls | None: the MSG record there."},
    {"decode_msgs", (PyCFunction)(void (*)(void))decode_msgs, METH_FASTCALL,
     "decode_msgs(buf, pos, end, count, make) -> (list, next_pos): an entry's messages."},
    {"encode_msgs", (PyCFunction)(void (*)(void))encode_msgs, METH_FASTCALL,
     "encode_msgs(msgs) -> bytes: the messages of a publish or batch entry, encoded."},
    {"crc_source", crc_source, METH_NOARGS, "crc_source() -> str: \"zlib-ng\" or \"zlib\"."},
    {"content_fingerprint", (PyCFunction)(void (*)(void))content_fingerprint, METH_FASTCALL,
     "content_fingerprint(hdr, data) -> int: engine/digest.py's message fingerprint."},
    {"set_untracked", (PyCFunction)(void (*)(void))set_untracked, METH_FASTCALL,
     "set_untracked(mapping, key, value): mapping[key] = value, an atomic tuple untracked."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "engine._codec_c",
    .m_doc = "The engine's per-message byte codecs in C.",
    .m_size = -1,
    .m_methods = methods,
};

/* The zng_crc32_z of the already loaded zlib_ng extension (RTLD_NOLOAD: never a second copy).
 * Anything missing leaves zlib's CRC in use; the values are the same either way. */
static void find_zlib_ng(void) {
    PyObject *ext = PyImport_ImportModule("zlib_ng.zlib_ng");
    if (ext == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *file = PyObject_GetAttrString(ext, "__file__");
    Py_DECREF(ext);
    if (file == NULL) {
        PyErr_Clear();
        return;
    }
    const char *path = PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
    if (path == NULL) {
        PyErr_Clear();
    } else {
        void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        if (handle != NULL) {
            /* the handle stays open: the module is never unloaded anyway */
            /* zng_crc32_z: a size_t length in every zlib-ng 2.x (zng_crc32's became size_t in 2.4) */
            zng_crc32_fn = (crc32_fn)dlsym(handle, "zng_crc32_z");
        }
    }
    Py_DECREF(file);
}

PyMODINIT_FUNC PyInit__codec_c(void) {
    find_zlib_ng();
    attr_subject = PyUnicode_InternFromString("subject");
    attr_hdr = PyUnicode_InternFromString("hdr");
    attr_data = PyUnicode_InternFromString("data");
    if (attr_subject == NULL || attr_hdr == NULL || attr_data == NULL) return NULL;
    return PyModule_Create(&module);
}
