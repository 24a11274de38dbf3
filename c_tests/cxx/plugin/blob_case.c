/* A library whose module blob holds one entry a plug-in's loader reads (legacy layout: no _lib,
 * no import tree), for the runtime's bad-input tests of plug-in loaders. BLOB_CASE picks it:
 *   1 tvmrt_test_throws   its loader throws
 *   2 tvmrt_test_null     its loader returns no module
 *   3 tvmrt_test_int      its loader returns an integer
 *   4 tvmrt_test_greedy   its loader reads past the end of the blob
 *   5 tvmrt_test_plugin   the real loader, its payload cut short (a symbol of 16 bytes, 3 there)
 *   6 tvmrt_nobody        a type no loader is registered for */
#include <stdint.h>

#if BLOB_CASE == 1
#define KEY "tvmrt_test_throws"
#elif BLOB_CASE == 2
#define KEY "tvmrt_test_null"
#elif BLOB_CASE == 3
#define KEY "tvmrt_test_int"
#elif BLOB_CASE == 4
#define KEY "tvmrt_test_greedy"
#elif BLOB_CASE == 5
#define KEY "tvmrt_test_plugin"
#elif BLOB_CASE == 6
#define KEY "tvmrt_nobody"
#else
#error "BLOB_CASE must be 1 to 6"
#endif
/* A dmlc string's length (16), then 3 of its bytes. */
#define PAYLOAD "\x10\0\0\0\0\0\0\0abc"

struct __attribute__((packed)) Blob {
  uint64_t nbytes;
  uint64_t count;
  uint64_t key_len;
  char key[sizeof(KEY) - 1];
  char payload[sizeof(PAYLOAD) - 1];
};

__attribute__((visibility("default"))) const struct Blob __tvm_dev_mblob = {
    sizeof(struct Blob) - sizeof(uint64_t), 1, sizeof(KEY) - 1, KEY, PAYLOAD};
