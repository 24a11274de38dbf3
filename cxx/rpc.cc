// RPC: the server loop programs like upstream's `tvm_rpc` (apps/cpp_rpc) call after their own
// handshake, with a connected socket the loop owns from then on, or with two functions that send
// and receive the session's bytes (a transport of the program's own).

#include "runtime.h"

namespace tvm {
namespace runtime {

// Declared by their callers, as upstream's (they are in no public header).
TVMRT_EXPORT void RPCServerLoop(int sockfd);
TVMRT_EXPORT void RPCServerLoop(PackedFunc fsend, PackedFunc frecv);

void RPCServerLoop(int sockfd) {
  TVMValue fd;
  fd.v_int64 = sockfd;
  int code = 0;
  tvmrt::CallGlobal("rpc.ServerLoop", {fd}, {kDLInt}, &code);
}

void RPCServerLoop(PackedFunc fsend, PackedFunc frecv) {
  // The host's functions, as functions of this runtime that call them back; each count dropped
  // however the loop ends.
  struct Held {
    TVMFunctionHandle h;
    ~Held() { TVMFuncFree(h); }
  };
  Held send{tvmrt::Adopt(fsend.get())};
  Held recv{tvmrt::Adopt(frecv.get())};
  TVMValue args[2];
  args[0].v_handle = send.h;
  args[1].v_handle = recv.h;
  int code = 0;
  tvmrt::CallGlobal("rpc.ServerLoop", {args[0], args[1]}, {kTVMPackedFuncHandle, kTVMPackedFuncHandle}, &code);
}

}  // namespace runtime
}  // namespace tvm
