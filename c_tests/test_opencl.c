/* OpenCL through the C API: device attributes, device arrays, both creation paths of models built
 * for OpenCL, texture builds for TVM's Adreno target among them (outputs byte-equal to upstream's
 * OpenCL runtime on pocl), weights shared across executors
 * and batch variants, and bad input on devices. Exits 77 (skipped) when there is no OpenCL
 * device, unless TVM_RT_REQUIRE_OPENCL=1. Usage: test_opencl <fixtures/opencl> [arrays|missing];
 * with "arrays", only the device arrays (for valgrind: pocl's compiler takes minutes under it);
 * with "missing", run where OpenCL cannot be opened (TVM_RT_OPENCL_LIBRARY names no library): OpenCL
 * models fail with a clear error, CPU models still run. */
#include "executor.h"

static int64_t device_attr(int device_type, int device_id, int kind, int* code) {
  TVMFunctionHandle f = NULL;
  OK(TVMFuncGetGlobal("runtime.GetDeviceAttr", &f));
  TVMValue v[3], r;
  int c[3] = {kDLInt, kDLInt, kDLInt};
  v[0].v_int64 = device_type;
  v[1].v_int64 = device_id;
  v[2].v_int64 = kind;
  *code = -1;
  r.v_int64 = -1;
  if (TVMFuncCall(f, v, c, 3, &r, code) != 0) *code = -2;
  return r.v_int64;
}

static void check_arrays(void) {
  int64_t shape[2] = {3, 5};
  float host[15], back[15];
  for (int i = 0; i < 15; i++) host[i] = (float)i * 0.5f - 3.0f;
  TVMArrayHandle a = NULL, b = NULL, small = NULL, cpu = NULL;
  OK(TVMArrayAlloc(shape, 2, kDLFloat, 32, 1, kDLOpenCL, 0, &a));
  OK(TVMArrayAlloc(shape, 2, kDLFloat, 32, 1, kDLOpenCL, 0, &b));
  OK(TVMArrayAlloc(shape, 2, kDLFloat, 32, 1, kDLCPU, 0, &cpu));
  CHECK(a->device.device_type == kDLOpenCL, "device type %d", a->device.device_type);
  OK(TVMArrayCopyFromBytes(a, host, sizeof host));
  OK(TVMArrayCopyFromTo(a, b, NULL)); /* device -> device */
  OK(TVMSynchronize(kDLOpenCL, 0, NULL));
  OK(TVMArrayCopyFromTo(b, cpu, NULL)); /* device -> host */
  memcpy(back, cpu->data, sizeof back);
  CHECK(memcmp(host, back, sizeof host) == 0, "host -> device -> device -> host");
  memset(back, 0, sizeof back);
  OK(TVMArrayCopyToBytes(b, back, sizeof back));
  CHECK(memcmp(host, back, sizeof host) == 0, "device -> bytes");

  /* Bad input: sizes that differ, a device that does not exist, a device type not served. */
  int64_t two = 2;
  OK(TVMArrayAlloc(&two, 1, kDLFloat, 32, 1, kDLOpenCL, 0, &small));
  CHECK(TVMArrayCopyFromTo(a, small, NULL) == -1, "copy between sizes");
  CHECK(strstr(TVMGetLastError(), "cannot copy") != NULL, "%s", TVMGetLastError());
  CHECK(TVMArrayCopyFromBytes(a, host, 7) == -1, "copy of 7 bytes");
  TVMArrayHandle none = NULL;
  CHECK(TVMArrayAlloc(shape, 2, kDLFloat, 32, 1, kDLOpenCL, 9, &none) == -1 && none == NULL, "device 9");
  CHECK(strstr(TVMGetLastError(), "Invalid device id 9") != NULL, "%s", TVMGetLastError());
  CHECK(TVMArrayAlloc(shape, 2, kDLFloat, 32, 1, kDLCUDA, 0, &none) == -1, "cuda");
  CHECK(TVMSynchronize(kDLOpenCL, 3, NULL) == -1, "sync of a missing device");

  /* Raw device memory. */
  DLDevice dev = {kDLOpenCL, 0};
  DLDataType f32 = {kDLFloat, 32, 1};
  void* p = NULL;
  OK(TVMDeviceAllocDataSpace(dev, 256, 64, f32, &p));
  CHECK(p != NULL, "device data space");
  OK(TVMDeviceFreeDataSpace(dev, p));
  CHECK(TVMDeviceAllocDataSpaceWithScope(dev, 2, shape, f32, "global.texture", &p) == -1, "a rank-2 texture");
  CHECK(strstr(TVMGetLastError(), "rank 3") != NULL, "%s", TVMGetLastError());
  /* A texture: an image, written and read through a tensor of its shape. */
  int64_t tshape[5] = {1, 2, 3, 5, 4};
  void* img = NULL;
  OK(TVMDeviceAllocDataSpaceWithScope(dev, 5, tshape, f32, "global.texture", &img));
  DLTensor t = {img, dev, 5, f32, tshape, NULL, 0};
  float px[120], px2[120];
  for (int i = 0; i < 120; i++) px[i] = (float)i * 0.25f - 9.0f;
  OK(TVMArrayCopyFromBytes(&t, px, sizeof px));
  OK(TVMArrayCopyToBytes(&t, px2, sizeof px2));
  CHECK(memcmp(px, px2, sizeof px) == 0, "host -> image -> host");
  CHECK(TVMArrayCopyToBytes(&t, px2, 64) == -1, "a part of an image");
  OK(TVMDeviceFreeDataSpace(dev, img));
  CHECK(TVMDeviceAllocDataSpaceWithScope(dev, 5, tshape, f32, "local", &p) == -1, "an unknown scope");
  /* Streams: a queue of their own, current for the thread that sets one; copies go on it. */
  TVMStreamHandle s = NULL;
  OK(TVMStreamCreate(kDLOpenCL, 0, &s));
  CHECK(s != NULL, "a stream is a queue of its own");
  OK(TVMSetStream(kDLOpenCL, 0, s));
  float ones[15], again[15] = {0};
  for (int i = 0; i < 15; i++) ones[i] = 1.0f + (float)i;
  OK(TVMArrayCopyFromBytes(a, ones, sizeof ones));
  OK(TVMArrayCopyFromTo(a, b, s));
  OK(TVMSynchronize(kDLOpenCL, 0, s));
  OK(TVMArrayCopyToBytes(b, again, sizeof again));
  CHECK(memcmp(ones, again, sizeof again) == 0, "bytes through a stream");
  OK(TVMSetStream(kDLOpenCL, 0, NULL));
  OK(TVMStreamStreamSynchronize(kDLOpenCL, 0, s, NULL));
  OK(TVMStreamFree(kDLOpenCL, 0, s));
  CHECK(TVMSynchronize(kDLOpenCL, 0, s) == -1, "a freed stream is refused");
  CHECK(TVMSetStream(kDLOpenCL, 0, (TVMStreamHandle)64) == -1, "a handle that is no stream is refused");
  CHECK(strstr(TVMGetLastError(), "is not a stream") != NULL, "%s", TVMGetLastError());
  OK(TVMStreamFree(kDLOpenCL, 0, NULL));

  OK(TVMArrayFree(a));
  OK(TVMArrayFree(b));
  OK(TVMArrayFree(small));
  OK(TVMArrayFree(cpu));
}

static void check_model(const char* dir, int factory) {
  Fixture fx;
  CHECK(load_fixture(dir, &fx) == 0, "cannot read %s", dir);
  char path[700];
  snprintf(path, sizeof path, "%s/lib.so", dir);
  TVMModuleHandle lib = NULL;
  OK(TVMModLoadFromFile(path, "so", &lib));
  if (!lib) return;
  TVMModuleHandle m = factory ? create_from_factory_on(lib, kDLOpenCL) : create_from_json_on(lib, dir, kDLOpenCL);
  if (m) {
    if (!factory || !fx.factory_weights) load_params(m, dir);
    /* Host arrays in and out, then device arrays in and out. */
    run_and_check_with(m, &fx, factory ? "factory, host arrays" : "create, host arrays", kDLCPU);
    run_and_check_with(m, &fx, factory ? "factory, device arrays" : "create, device arrays", kDLOpenCL);
    OK(TVMModFree(m));
  }
  OK(TVMModFree(lib));
}

/* Batch 1 and batch 4 builds sharing one copy of the weights on the device. */
static void check_sharing(const char* root) {
  char d1[600], d4[600], path[700];
  snprintf(d1, sizeof d1, "%s/mlp_unbound_cl_b1", root);
  snprintf(d4, sizeof d4, "%s/mlp_unbound_cl_b4", root);
  Fixture f1, f4;
  CHECK(load_fixture(d1, &f1) == 0 && load_fixture(d4, &f4) == 0, "fixtures");
  TVMModuleHandle lib1 = NULL, lib4 = NULL;
  snprintf(path, sizeof path, "%s/lib.so", d1);
  OK(TVMModLoadFromFile(path, "so", &lib1));
  snprintf(path, sizeof path, "%s/lib.so", d4);
  OK(TVMModLoadFromFile(path, "so", &lib4));
  if (!lib1 || !lib4) return;
  TVMModuleHandle a = create_from_json_on(lib1, d1, kDLOpenCL);
  TVMModuleHandle b = create_from_json_on(lib4, d4, kDLOpenCL);
  load_params(a, d1);
  snprintf(path, sizeof path, "%s/params.bin", d4);
  size_t size = 0;
  void* blob = read_file(path, &size);
  share_params_blob(b, a, blob, size);
  free(blob);
  /* The source goes first: the shared device buffers live on with the sharer. */
  run_and_check(a, &f1, "shared source");
  OK(TVMModFree(a));
  run_and_check(b, &f4, "batch 4 sharing batch 1's device weights");
  OK(TVMModFree(b));
  OK(TVMModFree(lib1));
  OK(TVMModFree(lib4));
}

/* A machine without OpenCL: no device exists, OpenCL models fail with an error saying what is
 * missing, CPU models run. */
static int check_missing(const char* root) {
  int code = 0;
  CHECK(device_attr(kDLOpenCL, 0, 0, &code) == 0 && code == kDLInt, "no OpenCL device exists");
  int64_t shape[1] = {4};
  TVMArrayHandle a = NULL;
  CHECK(TVMArrayAlloc(shape, 1, kDLFloat, 32, 1, kDLOpenCL, 0, &a) == -1, "an OpenCL array");
  CHECK(strstr(TVMGetLastError(), "OpenCL is not available") != NULL, "%s", TVMGetLastError());
  char dir[600], path[700];
  snprintf(dir, sizeof dir, "%s/mlp_cl", root);
  snprintf(path, sizeof path, "%s/lib.so", dir);
  TVMModuleHandle lib = NULL;
  OK(TVMModLoadFromFile(path, "so", &lib)); /* loading touches no OpenCL */
  TVMFunctionHandle f = NULL;
  OK(TVMModGetFunction(lib, "default", 0, &f));
  TVMValue v[1], r;
  int c[1] = {kDLDevice}, rc = 0;
  v[0].v_device.device_type = kDLOpenCL;
  v[0].v_device.device_id = 0;
  CHECK(TVMFuncCall(f, v, c, 1, &r, &rc) == -1, "an executor on OpenCL");
  CHECK(strstr(TVMGetLastError(), "OpenCL is not available") != NULL, "%s", TVMGetLastError());
  TVMFuncFree(f);
  OK(TVMModFree(lib));
  /* The CPU still works. */
  snprintf(dir, sizeof dir, "%s/../mlp_b1", root);
  Fixture fx;
  CHECK(load_fixture(dir, &fx) == 0, "cannot read %s", dir);
  snprintf(path, sizeof path, "%s/lib.so", dir);
  OK(TVMModLoadFromFile(path, "so", &lib));
  TVMModuleHandle m = lib ? create_from_factory(lib) : NULL;
  if (m) {
    run_and_check(m, &fx, "CPU model without OpenCL");
    OK(TVMModFree(m));
  }
  if (lib) OK(TVMModFree(lib));
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("without OpenCL: all checks passed\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <fixtures/opencl> [arrays|missing]\n", argv[0]);
    return 2;
  }
  if (argc > 2 && !strcmp(argv[2], "missing")) return check_missing(argv[1]);
  int code = 0;
  int64_t exist = device_attr(kDLOpenCL, 0, 0, &code);
  if (code != kDLInt || exist != 1) {
    const char* req = getenv("TVM_RT_REQUIRE_OPENCL");
    if (req && !strcmp(req, "1")) {
      fprintf(stderr, "TVM_RT_REQUIRE_OPENCL=1 but no OpenCL device\n");
      return 1;
    }
    printf("no OpenCL device: skipped\n");
    return 77;
  }
  CHECK(device_attr(kDLOpenCL, 7, 0, &code) == 0, "opencl(7) does not exist");
  CHECK(device_attr(kDLCUDA, 0, 0, &code) == 0 && code == kDLInt, "cuda does not exist");
  CHECK(device_attr(kDLOpenCL, 0, 1, &code) > 0 && code == kDLInt, "max threads per block");
  device_attr(kDLOpenCL, 0, 5, &code);
  CHECK(code == kTVMStr, "device name is a string (code %d)", code);
  check_arrays();
  int arrays_only = argc > 2 && !strcmp(argv[2], "arrays");
    /* hetero_cl places a CPU operator between OpenCL ones; given OpenCL alone, its CPU entries go to
   * the CPU. */
  /* convnet_tex_*: built for TVM's Adreno target (texture memory). */
  const char* models[] = {"mlp_cl",  "mlp_unbound_cl_b1", "mlp_unbound_cl_b4", "convnet_unbound_cl",
                          "fold_cl", "hetero_cl",         "convnet_tex_cl",    "convnet_tex_bound_cl"};
  for (int i = 0; i < 8 && !arrays_only; i++) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", argv[1], models[i]);
    check_model(dir, 1);
    check_model(dir, 0);
  }
  /* An executor on a stream of its own: its kernels and copies go on the thread's current stream,
   * and the outputs read back in order after them. */
  if (!arrays_only) {
    TVMStreamHandle s = NULL;
    OK(TVMStreamCreate(kDLOpenCL, 0, &s));
    OK(TVMSetStream(kDLOpenCL, 0, s));
    char dir[600];
    snprintf(dir, sizeof dir, "%s/convnet_unbound_cl", argv[1]);
    check_model(dir, 1);
    OK(TVMSynchronize(kDLOpenCL, 0, s));
    OK(TVMSetStream(kDLOpenCL, 0, NULL));
    OK(TVMStreamFree(kDLOpenCL, 0, s));
  }
  if (!arrays_only) check_sharing(argv[1]);
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("opencl: all checks passed\n");
  return 0;
}
