// RPC: the server loop programs like upstream's `tvm_rpc` (apps/cpp_rpc) call after their own
// handshake, with a connected socket the loop owns from then on.

#include "runtime.h"

namespace tvm {
namespace runtime {

// Declared by its callers, as upstream's (it is in no public header).
TVMRT_EXPORT void RPCServerLoop(int sockfd);

void RPCServerLoop(int sockfd) {
  TVMValue fd;
  fd.v_int64 = sockfd;
  int code = 0;
  tvmrt::CallGlobal("rpc.ServerLoop", {fd}, {kDLInt}, &code);
}

}  // namespace runtime
}  // namespace tvm
