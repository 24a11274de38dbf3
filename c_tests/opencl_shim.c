/* An OpenCL library for tests, selected with TVM_RT_OPENCL_LIBRARY: it forwards every entry point
 * the runtime calls to the real ICD loader (libOpenCL.so.1), and
 *  - fails calls on request: the n-th call of one function from the moment it is armed (once, or
 *    that call and every later one), without calling the real function: a status of
 *    CL_OUT_OF_RESOURCES, or a null object with that status in `errcode_ret`;
 *  - counts live device bytes: buffers and images from their creation to their release (what a
 *    GPU would hold; pocl allocates lazily, so the process's memory does not show them).
 * A test driver controls it through the functions at the end, after dlopen()ing the same file
 * (the runtime's dlopen of it returns the same instance). TVM_RT_CL_SHIM_FAIL=name:n[+] arms it
 * at load for programs that cannot call in. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_bitfield;
typedef void* H;

#define CL_OUT_OF_RESOURCES (-5)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void* g_real;

/* The calls seen per function (since the last reset), and the armed failure. */
#define MAX_FUNCS 64
static struct {
  const char* name;
  long calls;
} g_counts[MAX_FUNCS];
static int g_num_counts;
static char g_fail_name[64];
static long g_fail_at, g_fail_seen;
static int g_fail_persistent;

/* Live memory objects and their sizes. */
#define MAX_OBJECTS 65536
static struct {
  H mem;
  size_t bytes;
} g_objects[MAX_OBJECTS];
static int g_num_objects;
static size_t g_live, g_peak;

static void* real(const char* name) {
  if (!g_real) {
    const char* path = getenv("TVM_RT_CL_SHIM_REAL");
    g_real = dlopen(path ? path : "libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g_real) {
      fprintf(stderr, "opencl_shim: cannot open the real OpenCL library: %s\n", dlerror());
      abort();
    }
  }
  void* f = dlsym(g_real, name);
  if (!f) {
    fprintf(stderr, "opencl_shim: the real OpenCL library lacks %s\n", name);
    abort();
  }
  return f;
}

static void arm_from_env(void) {
  static int done;
  if (done) return;
  done = 1;
  const char* spec = getenv("TVM_RT_CL_SHIM_FAIL");
  if (!spec) return;
  const char* colon = strchr(spec, ':');
  if (!colon || (size_t)(colon - spec) >= sizeof g_fail_name) return;
  memcpy(g_fail_name, spec, (size_t)(colon - spec));
  g_fail_name[colon - spec] = 0;
  g_fail_at = atol(colon + 1);
  g_fail_persistent = strchr(colon, '+') != NULL;
}

/* Counts a call of `name`; whether it must fail. */
static int enter(const char* name) {
  pthread_mutex_lock(&g_lock);
  arm_from_env();
  int i = 0;
  while (i < g_num_counts && strcmp(g_counts[i].name, name) != 0) i++;
  if (i == g_num_counts && g_num_counts < MAX_FUNCS) g_counts[g_num_counts++].name = name;
  if (i < MAX_FUNCS) g_counts[i].calls++;
  int fail = 0;
  if (g_fail_at > 0 && strcmp(g_fail_name, name) == 0) {
    g_fail_seen++;
    fail = g_fail_seen == g_fail_at || (g_fail_persistent && g_fail_seen > g_fail_at);
  }
  pthread_mutex_unlock(&g_lock);
  return fail;
}

static void track(H mem, size_t bytes) {
  if (!mem) return;
  pthread_mutex_lock(&g_lock);
  if (g_num_objects < MAX_OBJECTS) {
    g_objects[g_num_objects].mem = mem;
    g_objects[g_num_objects].bytes = bytes;
    g_num_objects++;
    g_live += bytes;
    if (g_live > g_peak) g_peak = g_live;
  }
  pthread_mutex_unlock(&g_lock);
}

static void untrack(H mem) {
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < g_num_objects; i++) {
    if (g_objects[i].mem == mem) {
      g_live -= g_objects[i].bytes;
      g_objects[i] = g_objects[--g_num_objects];
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
}

/* A forwarded call returning a status. */
#define STATUS(name, params, args)                           \
  cl_int name params {                                       \
    if (enter(#name)) return CL_OUT_OF_RESOURCES;            \
    return ((cl_int(*) params)real(#name))args;              \
  }

/* A forwarded call returning an object, its status in `err`. */
#define OBJECT(name, params, args, err)                      \
  H name params {                                            \
    if (enter(#name)) {                                      \
      if (err) *(err) = CL_OUT_OF_RESOURCES;                 \
      return NULL;                                           \
    }                                                        \
    return ((H(*) params)real(#name))args;                   \
  }

STATUS(clGetPlatformIDs, (cl_uint n, H* p, cl_uint* np), (n, p, np))
STATUS(clGetPlatformInfo, (H p, cl_uint k, size_t n, void* v, size_t* r), (p, k, n, v, r))
STATUS(clGetDeviceIDs, (H p, cl_bitfield t, cl_uint n, H* d, cl_uint* nd), (p, t, n, d, nd))
STATUS(clGetDeviceInfo, (H d, cl_uint k, size_t n, void* v, size_t* r), (d, k, n, v, r))
OBJECT(clCreateContext, (const intptr_t* pr, cl_uint n, const H* d, void* cb, void* ud, cl_int* e),
       (pr, n, d, cb, ud, e), e)
STATUS(clReleaseContext, (H c), (c))
OBJECT(clCreateCommandQueue, (H c, H d, cl_bitfield p, cl_int* e), (c, d, p, e), e)
STATUS(clReleaseCommandQueue, (H q), (q))
STATUS(clFinish, (H q), (q))
STATUS(clFlush, (H q), (q))
OBJECT(clCreateSubBuffer, (H b, cl_bitfield f, cl_uint t, const void* i, cl_int* e), (b, f, t, i, e), e)
STATUS(clEnqueueWriteBuffer,
       (H q, H b, cl_uint bl, size_t o, size_t n, const void* p, cl_uint ne, const H* w, H* ev),
       (q, b, bl, o, n, p, ne, w, ev))
STATUS(clEnqueueReadBuffer, (H q, H b, cl_uint bl, size_t o, size_t n, void* p, cl_uint ne, const H* w, H* ev),
       (q, b, bl, o, n, p, ne, w, ev))
STATUS(clEnqueueCopyBuffer,
       (H q, H s, H d, size_t so, size_t dof, size_t n, cl_uint ne, const H* w, H* ev),
       (q, s, d, so, dof, n, ne, w, ev))
STATUS(clEnqueueFillBuffer,
       (H q, H b, const void* pat, size_t ps, size_t o, size_t n, cl_uint ne, const H* w, H* ev),
       (q, b, pat, ps, o, n, ne, w, ev))
OBJECT(clCreateProgramWithSource, (H c, cl_uint n, const char** s, const size_t* l, cl_int* e),
       (c, n, s, l, e), e)
OBJECT(clCreateProgramWithBinary,
       (H c, cl_uint n, const H* d, const size_t* l, const unsigned char** b, cl_int* st, cl_int* e),
       (c, n, d, l, b, st, e), e)
STATUS(clBuildProgram, (H p, cl_uint n, const H* d, const char* o, void* cb, void* ud), (p, n, d, o, cb, ud))
STATUS(clGetProgramBuildInfo, (H p, H d, cl_uint k, size_t n, void* v, size_t* r), (p, d, k, n, v, r))
STATUS(clGetProgramInfo, (H p, cl_uint k, size_t n, void* v, size_t* r), (p, k, n, v, r))
STATUS(clReleaseProgram, (H p), (p))
OBJECT(clCreateKernel, (H p, const char* name, cl_int* e), (p, name, e), e)
STATUS(clReleaseKernel, (H k), (k))
STATUS(clSetKernelArg, (H k, cl_uint i, size_t n, const void* v), (k, i, n, v))
STATUS(clEnqueueNDRangeKernel,
       (H q, H k, cl_uint d, const size_t* o, const size_t* g, const size_t* l, cl_uint ne, const H* w, H* ev),
       (q, k, d, o, g, l, ne, w, ev))
STATUS(clWaitForEvents, (cl_uint n, const H* ev), (n, ev))
STATUS(clReleaseEvent, (H ev), (ev))
STATUS(clGetEventProfilingInfo, (H ev, cl_uint k, size_t n, void* v, size_t* r), (ev, k, n, v, r))
/* Calls upstream's runtime makes and this one does not (so the shim serves both). */
STATUS(clGetCommandQueueInfo, (H q, cl_uint k, size_t n, void* v, size_t* r), (q, k, n, v, r))
OBJECT(clCreateUserEvent, (H c, cl_int* e), (c, e), e)
STATUS(clEnqueueUnmapMemObject, (H q, H m, void* p, cl_uint ne, const H* w, H* ev), (q, m, p, ne, w, ev))
void* clEnqueueMapBuffer(H q, H b, cl_uint bl, cl_bitfield f, size_t o, size_t n, cl_uint ne, const H* w, H* ev,
                         cl_int* e) {
  if (enter("clEnqueueMapBuffer")) {
    if (e) *e = CL_OUT_OF_RESOURCES;
    return NULL;
  }
  return ((void* (*)(H, H, cl_uint, cl_bitfield, size_t, size_t, cl_uint, const H*, H*, cl_int*))real(
      "clEnqueueMapBuffer"))(q, b, bl, f, o, n, ne, w, ev, e);
}
STATUS(clGetImageInfo, (H m, cl_uint k, size_t n, void* v, size_t* r), (m, k, n, v, r))
STATUS(clGetSupportedImageFormats, (H c, cl_bitfield f, cl_uint t, cl_uint n, void* fmts, cl_uint* nf),
       (c, f, t, n, fmts, nf))
STATUS(clEnqueueReadImage,
       (H q, H m, cl_uint bl, const size_t* o, const size_t* r, size_t rp, size_t sp, void* p, cl_uint ne,
        const H* w, H* ev),
       (q, m, bl, o, r, rp, sp, p, ne, w, ev))
STATUS(clEnqueueWriteImage,
       (H q, H m, cl_uint bl, const size_t* o, const size_t* r, size_t rp, size_t sp, const void* p, cl_uint ne,
        const H* w, H* ev),
       (q, m, bl, o, r, rp, sp, p, ne, w, ev))
STATUS(clEnqueueCopyImage,
       (H q, H s, H d, const size_t* so, const size_t* dof, const size_t* r, cl_uint ne, const H* w, H* ev),
       (q, s, d, so, dof, r, ne, w, ev))
STATUS(clEnqueueCopyBufferToImage,
       (H q, H s, H d, size_t so, const size_t* dof, const size_t* r, cl_uint ne, const H* w, H* ev),
       (q, s, d, so, dof, r, ne, w, ev))
STATUS(clEnqueueCopyImageToBuffer,
       (H q, H s, H d, const size_t* so, const size_t* r, size_t dof, cl_uint ne, const H* w, H* ev),
       (q, s, d, so, r, dof, ne, w, ev))
STATUS(clEnqueueFillImage,
       (H q, H m, const void* c, const size_t* o, const size_t* r, cl_uint ne, const H* w, H* ev),
       (q, m, c, o, r, ne, w, ev))
STATUS(clGetMemObjectInfo, (H m, cl_uint k, size_t n, void* v, size_t* r), (m, k, n, v, r))

/* Buffers and images are counted; sub-buffers are views and hold no memory of their own. */
H clCreateBuffer(H c, cl_bitfield f, size_t n, void* host, cl_int* e) {
  if (enter("clCreateBuffer")) {
    if (e) *e = CL_OUT_OF_RESOURCES;
    return NULL;
  }
  H m = ((H(*)(H, cl_bitfield, size_t, void*, cl_int*))real("clCreateBuffer"))(c, f, n, host, e);
  track(m, n);
  return m;
}

/* cl_image_format is two cl_uints; cl_image_desc starts with the type and the three extents. */
typedef struct {
  cl_uint order, type;
} ImageFormat;
typedef struct {
  cl_uint image_type;
  size_t width, height, depth, array_size, row_pitch, slice_pitch;
  cl_uint mip_levels, samples;
  H buffer;
} ImageDesc;

static size_t channel_bytes(const ImageFormat* f) {
  /* CL_FLOAT 0x10DE, CL_HALF_FLOAT 0x10DD, 8-bit types 0x10D0-0x10D2 and 0x10DA/0x10D7. */
  size_t size = f->type == 0x10DE ? 4 : f->type == 0x10DD ? 2 : (f->type == 0x10D0 || f->type == 0x10D2 ||
                                                                 f->type == 0x10D7 || f->type == 0x10DA) ? 1 : 4;
  /* CL_RGBA 0x10B5 and friends: four channels; CL_R 0x10B0: one. */
  size_t channels = f->order == 0x10B0 ? 1 : f->order == 0x10B2 ? 2 : 4;
  return size * channels;
}

H clCreateImage(H c, cl_bitfield flags, const ImageFormat* f, const ImageDesc* d, void* host, cl_int* e) {
  if (enter("clCreateImage")) {
    if (e) *e = CL_OUT_OF_RESOURCES;
    return NULL;
  }
  H m = ((H(*)(H, cl_bitfield, const ImageFormat*, const ImageDesc*, void*, cl_int*))real("clCreateImage"))(
      c, flags, f, d, host, e);
  if (f && d && !d->buffer) {
    size_t h = d->height ? d->height : 1, z = d->depth ? d->depth : 1;
    size_t layers = d->array_size ? d->array_size : 1;
    track(m, d->width * h * z * layers * channel_bytes(f));
  }
  return m;
}

cl_int clReleaseMemObject(H m) {
  if (enter("clReleaseMemObject")) return CL_OUT_OF_RESOURCES;
  untrack(m);
  return ((cl_int(*)(H))real("clReleaseMemObject"))(m);
}

/* The driver's controls. */

/* Arms a failure of the n-th call of `name` from now (n >= 1), once or from then on; n = 0 disarms. */
void tvm_rt_cl_shim_fail(const char* name, long n, int persistent) {
  pthread_mutex_lock(&g_lock);
  arm_from_env();
  snprintf(g_fail_name, sizeof g_fail_name, "%s", name ? name : "");
  g_fail_at = n;
  g_fail_seen = 0;
  g_fail_persistent = persistent;
  pthread_mutex_unlock(&g_lock);
}

/* Forgets the calls counted so far. */
void tvm_rt_cl_shim_reset_counts(void) {
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < g_num_counts; i++) g_counts[i].calls = 0;
  pthread_mutex_unlock(&g_lock);
}

/* The i-th function seen and its calls since the last reset; NULL past the end. */
const char* tvm_rt_cl_shim_count(int i, long* calls) {
  pthread_mutex_lock(&g_lock);
  const char* name = NULL;
  if (i >= 0 && i < g_num_counts) {
    name = g_counts[i].name;
    *calls = g_counts[i].calls;
  }
  pthread_mutex_unlock(&g_lock);
  return name;
}

/* Bytes of buffers and images alive now, and the most alive at once (reset to now by `reset`). */
size_t tvm_rt_cl_shim_live_bytes(void) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_live;
  pthread_mutex_unlock(&g_lock);
  return n;
}

size_t tvm_rt_cl_shim_peak_bytes(int reset) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_peak;
  if (reset) g_peak = g_live;
  pthread_mutex_unlock(&g_lock);
  return n;
}
