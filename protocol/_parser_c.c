/* protocol._parser_c: the client parser's fast path for PUB and HPUB (protocol/parser.py) in C,
 * the header line lookup atomic batches make three times a message (engine/batch.py) and the
 * bytes probes of the header checks (protocol/headers.py: holds, occurrences).
 *
 * Why C: every published message passes here. The Python fast path (a regular expression, its
 * groups, two int() and two decodes) took about 750 ns a message compiled with mypyc; this scan
 * takes about 150.
 *
 * It answers only the control lines that parser.py's strict patterns (_PUB_STRICT_RE,
 * _HPUB_STRICT_RE) match, when the whole payload and its CRLF are in the buffer and within the
 * limits; for anything else it returns None and the Python parser decides, as before. A property
 * test holds its answers equal to the Python fast path's.
 *
 * Must never: answer a line the strict patterns would not match, read past the buffer, or
 * answer differently from the Python fast path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

#define SIZE_DIGITS_MAX 9 /* the patterns' [0-9]{1,9} */

/* [!-~\x80-\xff]: the strict patterns' token bytes */
static int is_token_byte(unsigned char c) { return (c >= 0x21 && c <= 0x7e) || c >= 0x80; }

static int is_digits(const unsigned char *p, Py_ssize_t n, long *value) {
    if (n < 1 || n > SIZE_DIGITS_MAX) return 0;
    long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    *value = v;
    return 1;
}

/* the parser decodes subjects and replies with "surrogateescape" */
static PyObject *decode(const unsigned char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] >= 0x80) return PyUnicode_DecodeUTF8((const char *)p, n, "surrogateescape");
    }
    PyObject *s = PyUnicode_New(n, 127);
    if (s != NULL) memcpy(PyUnicode_DATA(s), p, (size_t)n);
    return s;
}

/* An int argument as a long long, saturated at its bounds instead of raising: a limit configured
 * above 2^63 is no limit here, as it is none to the Python comparison. */
static int clamped(PyObject *value, long long *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && !overflow && PyErr_Occurred()) return -1;
    *out = overflow > 0 ? LLONG_MAX : (overflow < 0 ? LLONG_MIN : v);
    return 0;
}

/* scan_pub(buf: bytes, pos: int, with_headers: bool, max_payload: int, max_control_line: int)
 *   -> (subject, reply | None, hdr | None, payload, next_pos) | None */
static PyObject *scan_pub(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_pub(buf: bytes, pos, with_headers, max_payload, max_control_line)");
        return NULL;
    }
    long long pos_arg, max_payload, max_control_line;
    if (clamped(args[1], &pos_arg) < 0 || clamped(args[3], &max_payload) < 0 ||
        clamped(args[4], &max_control_line) < 0)
        return NULL;
    int with_headers = PyObject_IsTrue(args[2]);
    if (with_headers < 0) return NULL;

    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t len = PyBytes_GET_SIZE(args[0]);
    /* a position outside the buffer is taken as re.match takes it: below 0 as 0, past the end
       as the end */
    Py_ssize_t pos = pos_arg < 0 ? 0 : (pos_arg > (long long)len ? len : (Py_ssize_t)pos_arg);
    Py_ssize_t op_len = with_headers ? 5 : 4; /* "HPUB " or "PUB " */
    if (len - pos < op_len) Py_RETURN_NONE;
    if (memcmp(buf + pos, with_headers ? "HPUB " : "PUB ", (size_t)op_len) != 0) Py_RETURN_NONE;

    /* fields: runs of token bytes separated by exactly one space, ended by CRLF */
    Py_ssize_t starts[4], ends[4];
    int fields = 0;
    Py_ssize_t i = pos + op_len;
    for (;;) {
        Py_ssize_t start = i;
        while (i < len && is_token_byte(buf[i])) i++;
        if (i == start || fields == 4) Py_RETURN_NONE; /* an empty field or one too many */
        starts[fields] = start;
        ends[fields] = i;
        fields++;
        if (i >= len) Py_RETURN_NONE;
        if (buf[i] == ' ') {
            i++;
            continue;
        }
        if (buf[i] == '\r' && i + 1 < len && buf[i + 1] == '\n') break;
        Py_RETURN_NONE;
    }
    Py_ssize_t line_end = i + 2; /* where the payload starts */
    long hdr_len = 0, total = 0;
    int reply_field = -1;
    if (with_headers) {
        if (fields < 3) Py_RETURN_NONE;
        if (!is_digits(buf + starts[fields - 2], ends[fields - 2] - starts[fields - 2], &hdr_len))
            Py_RETURN_NONE;
        if (!is_digits(buf + starts[fields - 1], ends[fields - 1] - starts[fields - 1], &total))
            Py_RETURN_NONE;
        if (fields == 4) reply_field = 1;
    } else {
        if (fields < 2 || fields > 3) Py_RETURN_NONE;
        if (!is_digits(buf + starts[fields - 1], ends[fields - 1] - starts[fields - 1], &total))
            Py_RETURN_NONE;
        if (fields == 3) reply_field = 1;
    }
    Py_ssize_t end = line_end + total;
    /* the control line's length counts from the position asked (below 0 too, as the Python
       comparison does); 128-bit so that no saturated bound can overflow it */
    __int128 line_len = (__int128)line_end - (__int128)pos_arg;
    if (!(hdr_len <= total && total <= max_payload && line_len <= (__int128)max_control_line &&
          len > end + 1 && buf[end] == '\r' && buf[end + 1] == '\n'))
        Py_RETURN_NONE; /* the Python parser answers these (a limit, or more data needed) */

    PyObject *subject = decode(buf + starts[0], ends[0] - starts[0]);
    if (subject == NULL) return NULL;
    PyObject *reply;
    if (reply_field < 0) {
        reply = Py_NewRef(Py_None);
    } else {
        reply = decode(buf + starts[reply_field], ends[reply_field] - starts[reply_field]);
        if (reply == NULL) {
            Py_DECREF(subject);
            return NULL;
        }
    }
    Py_ssize_t split = line_end + hdr_len;
    PyObject *hdr = hdr_len > 0
                        ? PyBytes_FromStringAndSize((const char *)buf + line_end, hdr_len)
                        : Py_NewRef(Py_None);
    PyObject *payload = PyBytes_FromStringAndSize((const char *)buf + split, end - split);
    PyObject *next = PyLong_FromSsize_t(end + 2);
    if (hdr == NULL || payload == NULL || next == NULL) {
        Py_DECREF(subject);
        Py_DECREF(reply);
        Py_XDECREF(hdr);
        Py_XDECREF(payload);
        Py_XDECREF(next);
        return NULL;
    }
    PyObject *result = PyTuple_New(5);
    if (result == NULL) {
        Py_DECREF(subject);
        Py_DECREF(reply);
        Py_DECREF(hdr);
        Py_DECREF(payload);
        Py_DECREF(next);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, subject);
    PyTuple_SET_ITEM(result, 1, reply);
    PyTuple_SET_ITEM(result, 2, hdr);
    PyTuple_SET_ITEM(result, 3, payload);
    PyTuple_SET_ITEM(result, 4, next);
    return result;
}

/* memmem for the short haystacks and needles of header probes: glibc's memmem prepares its
 * two-way search on every call (25-35 ns on a 60-byte header), a memchr for the needle's first
 * byte and a memcmp of the rest is about 15 ns. Worst case O(len(hay) * len(needle)), with both
 * bounded by the header limit. */
static const char *find_short(const char *hay, size_t hay_len, const char *needle,
                              size_t needle_len) {
    if (needle_len == 0) return hay;
    if (needle_len > hay_len) return NULL;
    const char *last = hay + (hay_len - needle_len);
    while (hay <= last) {
        const char *candidate = memchr(hay, needle[0], (size_t)(last - hay) + 1);
        if (candidate == NULL) return NULL;
        if (memcmp(candidate + 1, needle + 1, needle_len - 1) == 0) return candidate;
        hay = candidate + 1;
    }
    return NULL;
}

/* header_line_value(hdr: bytes, line_key: bytes) -> str | None: the value of the first header
 * line whose "\r\n<key>:" is line_key, after its leading spaces, up to the line's CRLF (or the
 * end of hdr), decoded as the parser decodes; None when no line has that key. */
static PyObject *header_line_value(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "header_line_value(hdr: bytes, line_key: bytes)");
        return NULL;
    }
    const char *hdr = PyBytes_AS_STRING(args[0]);
    Py_ssize_t hdr_len = PyBytes_GET_SIZE(args[0]);
    const char *key = PyBytes_AS_STRING(args[1]);
    Py_ssize_t key_len = PyBytes_GET_SIZE(args[1]);
    const char *found = find_short(hdr, (size_t)hdr_len, key, (size_t)key_len);
    if (found == NULL) Py_RETURN_NONE;
    const char *start = found + key_len, *limit = hdr + hdr_len;
    const char *end = find_short(start, (size_t)(limit - start), "\r\n", 2);
    if (end == NULL) end = limit;
    while (start < end && *start == ' ') start++;
    return decode((const unsigned char *)start, end - start);
}

/* holds(buf: bytes, part: bytes) -> bool: ``part in buf``. The header probes of every published
 * and stored message use it: bytes ``in`` first tries ``part`` as an integer (building and
 * dropping a TypeError), and ``bytes.find`` parses its arguments into a tuple; this is one find_short. */
static PyObject *holds(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "holds(buf: bytes, part: bytes)");
        return NULL;
    }
    const char *found = find_short(PyBytes_AS_STRING(args[0]), (size_t)PyBytes_GET_SIZE(args[0]),
                               PyBytes_AS_STRING(args[1]), (size_t)PyBytes_GET_SIZE(args[1]));
    return PyBool_FromLong(found != NULL);
}

/* occurrences(buf: bytes, part: bytes) -> int: ``buf.count(part)`` (non-overlapping; an empty
 * part counts len(buf) + 1 times, as bytes.count does), for the same probes as ``holds``. */
static PyObject *occurrences(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "occurrences(buf: bytes, part: bytes)");
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(args[0]), *end = p + PyBytes_GET_SIZE(args[0]);
    const char *part = PyBytes_AS_STRING(args[1]);
    size_t part_len = (size_t)PyBytes_GET_SIZE(args[1]);
    if (part_len == 0) return PyLong_FromSsize_t(PyBytes_GET_SIZE(args[0]) + 1);
    Py_ssize_t n = 0;
    const char *found;
    while ((found = find_short(p, (size_t)(end - p), part, part_len)) != NULL) {
        n++;
        p = found + part_len;
    }
    return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"scan_pub", (PyCFunction)(void (*)(void))scan_pub, METH_FASTCALL,
     "scan_pub(buf, pos, with_headers, max_payload, max_control_line) -> (subject, reply, hdr, "
     "payload, next_pos) or None: a complete, strictly formed PUB/HPUB at pos."},
    {"header_line_value", (PyCFunction)(void (*)(void))header_line_value, METH_FASTCALL,
     "header_line_value(hdr, line_key) -> str | None: a header line's value (see batch.py)."},
    {"holds", (PyCFunction)(void (*)(void))holds, METH_FASTCALL,
     "holds(buf, part) -> bool: part in buf, for bytes (see protocol/headers.py)."},
    {"occurrences", (PyCFunction)(void (*)(void))occurrences, METH_FASTCALL,
     "occurrences(buf, part) -> int: buf.count(part), for bytes (see protocol/headers.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "protocol._parser_c",
    .m_doc = "The client parser's PUB/HPUB fast path in C.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__parser_c(void) { return PyModule_Create(&module); }
