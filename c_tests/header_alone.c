/* The header compiles on its own, with every warning an error. */
#include "tvm_runtime.h"

int main(void) {
  TVMValue v;
  v.v_int64 = kTVMArgInt;
  return (int)v.v_int64 + (TVMGetLastError() == 0);
}
