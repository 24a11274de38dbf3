/* Bad input through the C API: every failure returns -1 with a message naming the problem, and
 * the runtime stays usable. usage: test_errors MLP_FIXTURE_DIR */
#include "fixture.h"

#define EXPECT_ERROR(call, needle)                                                   \
  do {                                                                               \
    int rc_ = (call);                                                                \
    const char* msg_ = TVMGetLastError();                                            \
    CHECK(rc_ == -1, "%s returned %d, expected -1", #call, rc_);                     \
    CHECK(msg_ && strstr(msg_, needle), "%s: message '%s' lacks '%s'", #call, msg_, needle); \
  } while (0)

static TVMModuleHandle lib, gmod;
static TVMFunctionHandle f_set_input, f_run, f_get_output, f_load_params;

static int set_input_shape(const char* name, int64_t* shape, int ndim, int code, int bits) {
  TVMArrayHandle arr = NULL;
  OK(TVMArrayAlloc(shape, ndim, code, bits, 1, kDLCPU, 0, &arr));
  TVMValue v[2], r;
  int c[2] = {kTVMStr, kTVMNDArrayHandle}, rc;
  v[0].v_str = name;
  v[1].v_handle = arr;
  int status = TVMFuncCall(f_set_input, v, c, 2, &r, &rc);
  TVMArrayFree(arr);
  return status;
}

static int load_params_bytes(const void* data, size_t size) {
  TVMByteArray arr = {(const char*)data, size};
  TVMValue v[1], r;
  int c[1] = {kTVMBytes}, rc;
  v[0].v_handle = &arr;
  return TVMFuncCall(f_load_params, v, c, 1, &r, &rc);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char path[700];
  TVMValue v[4], r;
  int c[4], rc;

  /* Loading. */
  EXPECT_ERROR(TVMModLoadFromFile("/nonexistent/lib.so", "", &lib), "no such file");
  EXPECT_ERROR(TVMModLoadFromFile("/nonexistent/model", "", &lib), "cannot deduce");
  EXPECT_ERROR(TVMModLoadFromFile("model.params", "", &lib), "not registered");
  EXPECT_ERROR(TVMModLoadFromFile(NULL, "", &lib), "null");

  snprintf(path, sizeof path, "%s/lib.so", argv[1]);
  OK(TVMModLoadFromFile(path, "", &lib));
  TVMFunctionHandle f_default = NULL;
  OK(TVMModGetFunction(lib, "default", 0, &f_default));
  v[0].v_device.device_type = kDLCPU;
  v[0].v_device.device_id = 0;
  c[0] = kDLDevice;
  OK(TVMFuncCall(f_default, v, c, 1, &r, &rc));
  gmod = r.v_handle;
  /* A device this runtime does not serve. */
  v[0].v_device.device_type = 2;
  EXPECT_ERROR(TVMFuncCall(f_default, v, c, 1, &r, &rc), "not enabled");
  TVMFuncFree(f_default);

  OK(TVMModGetFunction(gmod, "set_input", 0, &f_set_input));
  OK(TVMModGetFunction(gmod, "run", 0, &f_run));
  OK(TVMModGetFunction(gmod, "get_output", 0, &f_get_output));
  OK(TVMModGetFunction(gmod, "load_params", 0, &f_load_params));
  TVMFunctionHandle missing = (void*)1;
  OK(TVMModGetFunction(gmod, "no_such_function", 0, &missing));
  CHECK(missing == NULL, "unknown function gives NULL");

  /* Inputs: as upstream's, any shape or dtype of the input's byte size is copied and a name that
   * is not an input is skipped; another byte size is an error. Strict mode refuses the others. */
  int64_t good[4] = {1, 1, 28, 28}, bad[2] = {1, 784}, wrong[4] = {1, 1, 28, 27};
  OK(set_input_shape("no_such_input", good, 4, 2, 32));
  OK(set_input_shape("data", bad, 2, 2, 32));
  OK(set_input_shape("data", good, 4, 0, 32));
  EXPECT_ERROR(set_input_shape("data", wrong, 4, 2, 32), "the size in bytes must exactly match");
  TVMFunctionHandle f_strict;
  OK(TVMModGetFunction(gmod, "set_strict_inputs", 0, &f_strict));
  v[0].v_int64 = 1;
  c[0] = kDLInt;
  OK(TVMFuncCall(f_strict, v, c, 1, &r, &rc));
  /* The C message names upstream's class (InternalError); tvmrt.LastErrorKind the finer one. */
  TVMFunctionHandle f_kind;
  OK(TVMFuncGetGlobal("tvmrt.LastErrorKind", &f_kind));
  EXPECT_ERROR(set_input_shape("no_such_input", good, 4, 2, 32), "no input named 'no_such_input'");
  OK(TVMFuncCall(f_kind, NULL, NULL, 0, &r, &rc));
  CHECK(rc == kTVMStr && strcmp(r.v_str, "KeyError") == 0, "an unknown name is a KeyError");
  EXPECT_ERROR(set_input_shape("data", bad, 2, 2, 32), "input 'data' is float32 [1, 1, 28, 28], got float32 [1, 784]");
  OK(TVMFuncCall(f_kind, NULL, NULL, 0, &r, &rc));
  CHECK(rc == kTVMStr && strcmp(r.v_str, "ValueError") == 0, "another shape is a ValueError");
  EXPECT_ERROR(set_input_shape("data", good, 4, 0, 32), "got int32");
  OK(TVMFuncCall(f_kind, NULL, NULL, 0, &r, &rc));
  CHECK(rc == kTVMStr && strcmp(r.v_str, "TypeError") == 0, "another dtype is a TypeError");
  TVMAPISetLastError("IndexError: set by a host");
  OK(TVMFuncCall(f_kind, NULL, NULL, 0, &r, &rc));
  CHECK(rc == kTVMStr && strcmp(r.v_str, "IndexError") == 0, "a host's message keeps the class it names");
  TVMFuncFree(f_kind);
  v[0].v_int64 = 0;
  OK(TVMFuncCall(f_strict, v, c, 1, &r, &rc));
  TVMFuncFree(f_strict);
  OK(set_input_shape("data", good, 4, 2, 32));
  v[0].v_int64 = 0;
  c[0] = kDLInt;
  v[1].v_handle = NULL;
  c[1] = kTVMNullptr;
  EXPECT_ERROR(TVMFuncCall(f_set_input, v, c, 2, &r, &rc), "expected tensor");
  v[0].v_int64 = 99;
  EXPECT_ERROR(TVMFuncCall(f_set_input, v, c, 2, &r, &rc), "input index 99 out of range (7 inputs)");
  v[0].v_int64 = -1;
  EXPECT_ERROR(TVMFuncCall(f_set_input, v, c, 2, &r, &rc), "negative index -1");
  v[0].v_int64 = 99;
  EXPECT_ERROR(TVMFuncCall(f_set_input, v, c, 1, &r, &rc), "takes 2 arguments");
  EXPECT_ERROR(TVMFuncCall(f_get_output, v, c, 1, &r, &rc), "output index 99 out of range (1 outputs)");
  v[0].v_str = "nope";
  c[0] = kTVMStr;
  EXPECT_ERROR(TVMFuncCall(f_get_output, v, c, 1, &r, &rc), "Invalid output node:nope");

  /* Params: wrong magic, every truncation, absurd counts. */
  snprintf(path, sizeof path, "%s/params.bin", argv[1]);
  size_t size = 0;
  unsigned char* blob = read_file(path, &size);
  CHECK(blob != NULL, "params");
  for (size_t n = 0; n < size; n += (n < 256 ? 1 : 997)) {
    int status = load_params_bytes(blob, n);
    CHECK(status == -1, "truncated params of %zu bytes accepted", n);
    CHECK(strstr(TVMGetLastError(), "params") != NULL, "message: %s", TVMGetLastError());
  }
  unsigned char* bad_blob = malloc(size);
  memcpy(bad_blob, blob, size);
  bad_blob[0] ^= 0xff;
  EXPECT_ERROR(load_params_bytes(bad_blob, size), "not a params blob");
  memcpy(bad_blob, blob, size);
  memset(bad_blob + 16, 0xff, 8); /* the names count */
  EXPECT_ERROR(load_params_bytes(bad_blob, size), "exceeds");
  OK(load_params_bytes(blob, size));
  free(bad_blob);
  free(blob);

  /* The executor still runs. */
  OK(TVMFuncCall(f_run, NULL, NULL, 0, &r, &rc));

  /* A kernel called wrongly reports the kernel's own assertion. */
  TVMFunctionHandle kernel = NULL;
  OK(TVMModGetFunction(lib, "tvmgen_default_fused_nn_softmax", 1, &kernel));
  CHECK(kernel != NULL, "kernel lookup");
  EXPECT_ERROR(TVMFuncCall(kernel, NULL, NULL, 0, &r, &rc), "num_args");
  TVMFuncFree(kernel);
  OK(TVMFuncCall(f_run, NULL, NULL, 0, &r, &rc));

  /* Malformed graphs for tvm.graph_executor.create. */
  TVMFunctionHandle create = NULL;
  OK(TVMFuncGetGlobal("tvm.graph_executor.create", &create));
  const char* graphs[][2] = {
      {"{not json", "not valid JSON"},
      {"{\"nodes\": []}", "missing required key"},
      {"{\"nodes\":[{\"op\":\"tvm_op\",\"name\":\"f\",\"attrs\":{\"func_name\":\"missing_kernel\",\"num_inputs\":\"0\","
       "\"num_outputs\":\"1\",\"flatten_data\":\"0\"},\"inputs\":[]}],\"arg_nodes\":[],\"node_row_ptr\":[0,1],"
       "\"heads\":[[0,0,0]],\"attrs\":{\"dltype\":[\"list_str\",[\"float32\"]],\"storage_id\":[\"list_int\",[0]],"
       "\"shape\":[\"list_shape\",[[2]]]}}",
       "no such function in module: missing_kernel"},
  };
  for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++) {
    v[0].v_str = graphs[i][0];
    c[0] = kTVMStr;
    v[1].v_handle = lib;
    c[1] = kTVMModuleHandle;
    v[2].v_int64 = 1;
    v[3].v_int64 = 0;
    c[2] = c[3] = kDLInt;
    EXPECT_ERROR(TVMFuncCall(create, v, c, 4, &r, &rc), graphs[i][1]);
  }
  v[1].v_handle = NULL;
  c[1] = kTVMNullptr;
  EXPECT_ERROR(TVMFuncCall(create, v, c, 4, &r, &rc), "expected Module");
  TVMFuncFree(create);

  /* Null handles and bad arguments to the C API itself. */
  EXPECT_ERROR(TVMFuncCall(NULL, NULL, NULL, 0, &r, &rc), "null");
  EXPECT_ERROR(TVMModGetFunction(NULL, "run", 0, &missing), "null");
  EXPECT_ERROR(TVMModGetFunction(gmod, NULL, 0, &missing), "null");
  TVMArrayHandle arr = NULL;
  int64_t shape[1] = {4};
  EXPECT_ERROR(TVMArrayAlloc(shape, 1, 2, 7, 1, kDLCPU, 0, &arr), "unsupported dtype");
  EXPECT_ERROR(TVMArrayAlloc(shape, 1, 2, 32, 1, 2, 0, &arr), "not enabled");
  EXPECT_ERROR(TVMArrayAlloc(shape, -1, 2, 32, 1, kDLCPU, 0, &arr), "invalid shape");
  OK(TVMArrayAlloc(shape, 1, 2, 32, 1, kDLCPU, 0, &arr));
  float buf[3];
  EXPECT_ERROR(TVMArrayCopyFromBytes(arr, buf, sizeof buf), "size mismatch");
  EXPECT_ERROR(TVMArrayCopyToBytes(arr, buf, sizeof buf), "size mismatch");
  OK(TVMArrayFree(arr));
  OK(TVMArrayFree(NULL));
  OK(TVMModFree(NULL));
  OK(TVMFuncFree(NULL));
  OK(TVMObjectFree(NULL));
  EXPECT_ERROR(TVMObjectRetain(NULL), "object handle is null");
  unsigned idx;
  EXPECT_ERROR(TVMObjectTypeKey2Index("relay.Expr", &idx), "Cannot find type relay.Expr");
  OK(TVMObjectTypeKey2Index("runtime.NDArray", &idx));
  CHECK(idx == 2, "NDArray index %u", idx);
  EXPECT_ERROR(TVMSynchronize(2, 0, NULL), "not enabled");
  OK(TVMSynchronize(kDLCPU, 0, NULL));

  /* Functions stay valid after their module is freed. */
  OK(TVMModFree(gmod));
  OK(TVMModFree(lib));
  OK(TVMFuncCall(f_run, NULL, NULL, 0, &r, &rc));
  TVMFuncFree(f_set_input);
  TVMFuncFree(f_run);
  TVMFuncFree(f_get_output);
  TVMFuncFree(f_load_params);

  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("error paths ok\n");
  return 0;
}
