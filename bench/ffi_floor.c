/* What a compiled module over CPython's stable ABI would pay for one prepared packed call: the
 * floor against which bench/ffi_floor.py sets ctypes' (the package's route). Built by that script
 * with Py_LIMITED_API for 3.9, so the same file is what an abi3 wheel would carry.
 *
 *   prepare(tvm_func_call, handle, values, codes, n, ret, ret_code) -> slot   (addresses as ints)
 *   invoke(slot): the GIL released around TVMFuncCall, as ctypes does; returns its status
 */
#define Py_LIMITED_API 0x03090000
#include <Python.h>
#include <stdint.h>

typedef int (*FuncCall)(void*, void*, int*, int, void*, int*);
typedef struct {
  FuncCall call;
  void *handle, *values, *ret;
  int *codes, *ret_code;
  int n;
} Prepared;

static Prepared slots[16];
static int used;

static PyObject* prepare(PyObject* self, PyObject* args) {
  unsigned long long call, handle, values, codes, ret, ret_code;
  int n;
  (void)self;
  if (!PyArg_ParseTuple(args, "KKKKiKK", &call, &handle, &values, &codes, &n, &ret, &ret_code)) return NULL;
  if (used == 16) {
    PyErr_SetString(PyExc_RuntimeError, "no slot left");
    return NULL;
  }
  Prepared p = {(FuncCall)(uintptr_t)call, (void*)(uintptr_t)handle, (void*)(uintptr_t)values,
                (void*)(uintptr_t)ret,     (int*)(uintptr_t)codes,    (int*)(uintptr_t)ret_code, n};
  slots[used] = p;
  return PyLong_FromLong(used++);
}

static PyObject* invoke(PyObject* self, PyObject* arg) {
  (void)self;
  long k = PyLong_AsLong(arg);
  if (k < 0 || k >= used) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "no such slot");
    return NULL;
  }
  Prepared* p = &slots[k];
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = p->call(p->handle, p->values, p->codes, p->n, p->ret, p->ret_code);
  Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
    {"prepare", prepare, METH_VARARGS, NULL}, {"invoke", invoke, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ffi_floor", NULL, -1, methods, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_ffi_floor(void) { return PyModule_Create(&module); }
