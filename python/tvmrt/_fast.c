/* tvmrt._fast: a request's one call into the runtime, made from C.
 *
 * The package calls the library through ctypes. A request is one packed call (tvmrt.run_into:
 * inputs set, run, outputs copied out) whose argument arrays are made once per executor
 * (_ffi.PreparedCall); what ctypes still costs per request is finding each array's first byte from
 * Python (about half a microsecond an array) and the call itself. `Call` does both here: it takes
 * the arrays, points each prepared DLTensor at its buffer, releases the GIL around TVMFuncCall,
 * and points them back at nothing.
 *
 * Built against the stable ABI of CPython 3.9 (one binary for 3.9 to 3.13 and later), so the one
 * wheel per platform stays; where it cannot load (a free-threaded build, PyPy) or was not built
 * (no Python headers where the package was built from source), the package keeps to ctypes.
 * Nothing here knows the runtime's types but the C calling convention of TVMFuncCall and the
 * position of a DLTensor's data pointer (its first field). */
#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

/* The buffer protocol: in the stable ABI's headers only from 3.11, but the same functions and
 * struct in every CPython 3 (PEP 3118), exported by each; declared here for 3.9 and 3.10. */
#if Py_LIMITED_API + 0 < 0x030b0000
typedef struct {
  void* buf;
  PyObject* obj;
  Py_ssize_t len;
  Py_ssize_t itemsize;
  int readonly;
  int ndim;
  char* format;
  Py_ssize_t* shape;
  Py_ssize_t* strides;
  Py_ssize_t* suboffsets;
  void* internal;
} Py_buffer;
PyAPI_FUNC(int) PyObject_GetBuffer(PyObject* obj, Py_buffer* view, int flags);
PyAPI_FUNC(void) PyBuffer_Release(Py_buffer* view);
#define PyBUF_SIMPLE 0
#define PyBUF_WRITABLE 0x0001
#endif

typedef int (*FuncCall)(void* handle, void* values, int* codes, int n, void* ret, int* ret_code);

enum { kMaxArrays = 64 };

typedef struct {
  PyObject_HEAD
  FuncCall fn;
  void* handle;
  void* values;
  int* codes;
  int nargs;
  void* ret;
  int* ret_code;
  Py_ssize_t count;   /* arrays per call */
  Py_ssize_t written; /* the arrays from this one on are written into: their buffers must be writable */
  void*** fields;     /* each array's DLTensor data pointer, in call order (malloc'd) */
  /* For request(): numpy's ndarray and empty, and the inputs' and outputs' dtypes and shapes
   * (tuples, in call order); all NULL when not given. */
  PyObject *ndarray, *empty, *in_dtypes, *in_shapes, *out_dtypes, *out_shapes;
} Call;

static void* as_pointer(PyObject* v) { return PyLong_AsVoidPtr(v); }

/* Call(TVMFuncCall, handle, values, codes, nargs, ret, ret_code, (tensor, ...), written[, plan]):
 * every argument before `written` an address the caller keeps alive for the object's life (its
 * PreparedCall holds them); the tensors from index `written` on are outputs, written into. `plan`,
 * for request(): (numpy.ndarray, numpy.empty, input dtypes, input shapes, output dtypes, output
 * shapes). */
static PyObject* call_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *fn, *handle, *values, *codes, *ret, *ret_code, *tensors;
  int nargs;
  Py_ssize_t written;
  PyObject* plan = NULL;
  if (kwargs && PyDict_Size(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "Call takes no keyword arguments");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "OOOOiOOO!n|O!", &fn, &handle, &values, &codes, &nargs, &ret, &ret_code, &PyTuple_Type,
                        &tensors, &written, &PyTuple_Type, &plan)) {
    return NULL;
  }
  Py_ssize_t count = PyTuple_Size(tensors);
  if (count > kMaxArrays) {
    PyErr_Format(PyExc_ValueError, "%zd arrays: at most %d", count, (int)kMaxArrays);
    return NULL;
  }
  if (written < 0 || written > count) {
    PyErr_Format(PyExc_ValueError, "the outputs from array %zd of %zd", written, count);
    return NULL;
  }
  allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
  Call* self = (Call*)alloc(type, 0);
  if (!self) return NULL;
  self->fn = (FuncCall)as_pointer(fn);
  self->handle = as_pointer(handle);
  self->values = as_pointer(values);
  self->codes = (int*)as_pointer(codes);
  self->nargs = nargs;
  self->ret = as_pointer(ret);
  self->ret_code = (int*)as_pointer(ret_code);
  self->count = count;
  self->written = written;
  self->fields = malloc((size_t)(count ? count : 1) * sizeof *self->fields);
  if (!self->fields) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < count; i++) self->fields[i] = (void**)as_pointer(PyTuple_GetItem(tensors, i));
  if (plan) {
    PyObject** parts[] = {&self->ndarray, &self->empty, &self->in_dtypes, &self->in_shapes, &self->out_dtypes,
                          &self->out_shapes};
    if (PyTuple_Size(plan) != 6) {
      PyErr_SetString(PyExc_ValueError, "Call: a plan is (ndarray, empty, in dtypes, in shapes, out dtypes, out shapes)");
      Py_DECREF(self);
      return NULL;
    }
    for (int i = 0; i < 6; i++) {
      *parts[i] = PyTuple_GetItem(plan, i);
      Py_INCREF(*parts[i]);
    }
    Py_ssize_t sizes[4] = {written, written, count - written, count - written};
    for (int i = 2; i < 6; i++) {
      if (!PyTuple_Check(*parts[i]) || PyTuple_Size(*parts[i]) != sizes[i - 2]) {
        PyErr_SetString(PyExc_ValueError, "Call: the plan's dtypes and shapes are tuples, one per array");
        Py_DECREF(self);
        return NULL;
      }
    }
  }
  if (PyErr_Occurred() || !self->fn || !self->values || !self->codes || !self->ret || !self->ret_code) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Call: a null address");
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject*)self;
}

/* call(array, ...) -> TVMFuncCall's status: the arrays bound to the tensors for the call alone.
 * An array without a C-contiguous buffer (writable, for an output) raises (BufferError,
 * ValueError) before anything runs. */
static PyObject* call_call(PyObject* obj, PyObject* args, PyObject* kwargs) {
  Call* self = (Call*)obj;
  Py_ssize_t n = PyTuple_Size(args);
  if (n != self->count || (kwargs && PyDict_Size(kwargs))) {
    PyErr_Format(PyExc_TypeError, "Call takes %zd arrays, %zd given", self->count, n);
    return NULL;
  }
  Py_buffer views[kMaxArrays];
  Py_ssize_t held = 0;
  for (; held < n; held++) {
    int flags = held >= self->written ? PyBUF_WRITABLE : PyBUF_SIMPLE;
    if (PyObject_GetBuffer(PyTuple_GetItem(args, held), &views[held], flags) != 0) break;
    *self->fields[held] = views[held].buf;
  }
  int status = -1;
  if (held == n) {
    Py_BEGIN_ALLOW_THREADS
    status = self->fn(self->handle, self->values, self->codes, self->nargs, self->ret, self->ret_code);
    Py_END_ALLOW_THREADS
  }
  for (Py_ssize_t i = 0; i < held; i++) {
    *self->fields[i] = NULL;
    PyBuffer_Release(&views[i]);
  }
  return held == n ? PyLong_FromLong(status) : NULL;
}

/* The attribute names request() reads, made once. */
static PyObject *str_dtype, *str_shape;

/* Whether `v` (an ndarray) has this dtype and shape: 1, 0, or 0 with no error left when a
 * comparison fails (the general path then says what is wrong). */
static int matches(PyObject* v, PyObject* dtype, PyObject* shape) {
  PyObject* got = PyObject_GetAttr(v, str_dtype);
  int ok = got && (got == dtype || PyObject_RichCompareBool(got, dtype, Py_EQ) == 1);
  Py_XDECREF(got);
  if (ok) {
    got = PyObject_GetAttr(v, str_shape);
    ok = got && PyObject_RichCompareBool(got, shape, Py_EQ) == 1;
    Py_XDECREF(got);
  }
  if (!ok) PyErr_Clear();
  return ok;
}

/* request(inputs, outputs or None) -> the outputs (a list: those given, or new arrays), None when
 * an input or output given is not a numpy array of its dtype and shape or an array has no buffer
 * to bind (the caller's general path takes it then, and explains), or TVMFuncCall's status when
 * it failed. */
static PyObject* call_request(PyObject* obj, PyObject* args) {
  Call* self = (Call*)obj;
  PyObject *inputs, *outs;
  if (!self->ndarray) {
    PyErr_SetString(PyExc_TypeError, "Call.request: made without a plan");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "O!O", &PyTuple_Type, &inputs, &outs)) return NULL;
  Py_ssize_t n_in = self->written, n_out = self->count - self->written;
  if (PyTuple_Size(inputs) != n_in) Py_RETURN_NONE;
  for (Py_ssize_t i = 0; i < n_in; i++) {
    PyObject* v = PyTuple_GetItem(inputs, i);
    if ((PyObject*)Py_TYPE(v) != self->ndarray ||
        !matches(v, PyTuple_GetItem(self->in_dtypes, i), PyTuple_GetItem(self->in_shapes, i))) {
      Py_RETURN_NONE;
    }
  }
  PyObject* arrays = PyTuple_New(self->count);
  PyObject* result = NULL;
  if (!arrays) return NULL;
  for (Py_ssize_t i = 0; i < n_in; i++) {
    PyObject* v = PyTuple_GetItem(inputs, i);
    Py_INCREF(v);
    PyTuple_SetItem(arrays, i, v);
  }
  if (outs == Py_None) {
    result = PyList_New(n_out);
    for (Py_ssize_t k = 0; result && k < n_out; k++) {
      PyObject* o = PyObject_CallFunctionObjArgs(self->empty, PyTuple_GetItem(self->out_shapes, k),
                                                 PyTuple_GetItem(self->out_dtypes, k), NULL);
      if (!o) Py_CLEAR(result);
      else PyList_SetItem(result, k, o);
    }
  } else if (PyList_Check(outs)) {
    if (PyList_Size(outs) != n_out) {
      Py_DECREF(arrays);
      Py_RETURN_NONE;
    }
    for (Py_ssize_t k = 0; k < n_out; k++) {
      PyObject* o = PyList_GetItem(outs, k);
      if ((PyObject*)Py_TYPE(o) != self->ndarray ||
          !matches(o, PyTuple_GetItem(self->out_dtypes, k), PyTuple_GetItem(self->out_shapes, k))) {
        Py_DECREF(arrays);
        Py_RETURN_NONE;
      }
    }
    result = outs;
    Py_INCREF(result);
  } else {
    PyErr_SetString(PyExc_TypeError, "Call.request: outputs are a list of one array per output, or None");
  }
  if (!result) {
    Py_DECREF(arrays);
    return NULL;
  }
  for (Py_ssize_t k = 0; k < n_out; k++) {
    PyObject* o = PyList_GetItem(result, k);
    Py_INCREF(o);
    PyTuple_SetItem(arrays, n_in + k, o);
  }
  PyObject* status = call_call(obj, arrays, NULL);
  Py_DECREF(arrays);
  if (!status) {
    Py_DECREF(result);
    if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_ValueError) ||
        PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      Py_RETURN_NONE;
    }
    return NULL;
  }
  if (PyLong_AsLong(status) != 0) {
    Py_DECREF(result);
    return status;
  }
  Py_DECREF(status);
  return result;
}

static PyMethodDef call_methods[] = {
    {"request", call_request, METH_VARARGS,
     "request(inputs, outputs or None): the outputs; None to take the general path; the status on an error"},
    {NULL, NULL, 0, NULL},
};

static void call_dealloc(PyObject* self) {
  Call* c = (Call*)self;
  free(c->fields);
  Py_XDECREF(c->ndarray);
  Py_XDECREF(c->empty);
  Py_XDECREF(c->in_dtypes);
  Py_XDECREF(c->in_shapes);
  Py_XDECREF(c->out_dtypes);
  Py_XDECREF(c->out_shapes);
  PyTypeObject* type = Py_TYPE(self);
  freefunc free_fn = (freefunc)PyType_GetSlot(type, Py_tp_free);
  free_fn(self);
  Py_DECREF(type);
}

static PyType_Slot call_slots[] = {
    {Py_tp_new, (void*)call_new},
    {Py_tp_call, (void*)call_call},
    {Py_tp_dealloc, (void*)call_dealloc},
    {Py_tp_methods, (void*)call_methods},
    {Py_tp_doc, (void*)"A prepared TVMFuncCall whose DLTensors are bound to the arrays of each call."},
    {0, NULL},
};

static PyType_Spec call_spec = {"tvmrt._fast.Call", sizeof(Call), 0, Py_TPFLAGS_DEFAULT, call_slots};

static int exec_module(PyObject* module) {
  if (!str_dtype && !(str_dtype = PyUnicode_InternFromString("dtype"))) return -1;
  if (!str_shape && !(str_shape = PyUnicode_InternFromString("shape"))) return -1;
  PyObject* type = PyType_FromSpec(&call_spec);
  if (!type) return -1;
  if (PyModule_AddObject(module, "Call", type) != 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

static PyModuleDef_Slot module_slots[] = {{Py_mod_exec, (void*)exec_module}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "tvmrt._fast", "A request's one call into the runtime, made from C.", 0, NULL,
    module_slots,          NULL,          NULL,                                                NULL,
};

PyMODINIT_FUNC PyInit__fast(void) { return PyModuleDef_Init(&module_def); }
