/* benchext: one function, so that the wheel holds compiled code. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *
benchext_sum (PyObject *self, PyObject *args)
{
  long long a, b;
  (void) self;
  if (!PyArg_ParseTuple (args, "LL", &a, &b))
    return NULL;
  return PyLong_FromLongLong (a + b);
}

static PyMethodDef methods[] = {
  { "sum", benchext_sum, METH_VARARGS, "a + b" },
  { NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = { PyModuleDef_HEAD_INIT, "benchext", NULL, -1, methods };

PyMODINIT_FUNC
PyInit_benchext (void)
{
  return PyModule_Create (&module);
}
