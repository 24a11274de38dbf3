// A device's RPC server written the way upstream's `tvm_rpc` (apps/cpp_rpc) is: the program does
// the socket work and the handshake itself, registers the functions a server provides
// (tvm.rpc.server.workpath / load_module / listdir) with TVM_REGISTER_GLOBAL, and hands each
// session's socket to tvm::runtime::RPCServerLoop in a child process. It uses upstream's C++
// headers only, so it links and runs on upstream's library and on this one alike.
//
// Usage: rpc_server <port> <key> [fd|funcs]. Listens on 127.0.0.1 only, serves until SIGTERM or
// SIGINT, then removes its work directory.
// `funcs` hands the loop two functions over the socket instead of the socket itself (the form a
// program with a transport of its own uses).

#include <arpa/inet.h>
#include <dirent.h>
#include <ftw.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tvm/runtime/module.h>
#include <tvm/runtime/registry.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace tvm {
namespace runtime {
// Upstream declares them in no public header: its own programs declare them the same way.
void RPCServerLoop(int sockfd);
void RPCServerLoop(PackedFunc fsend, PackedFunc frecv);
}  // namespace runtime
}  // namespace tvm

namespace {

constexpr int32_t kRPCMagic = 0xff271;
constexpr int32_t kRPCMismatch = 0xff273;

std::string g_work_dir;
volatile sig_atomic_t g_stop = 0;

void OnStop(int) { g_stop = 1; }

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

std::string WorkPath(const std::string& name) {
  if (name.empty() || name[0] == '/' || name.find("..") != std::string::npos) {
    LOG(FATAL) << "'" << name << "' is not a path inside the work directory";
  }
  return g_work_dir + "/" + name;
}

bool ReadAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = recv(fd, p, size, 0);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The server's side of the handshake: true when the client holds `key`.
bool Handshake(int fd, const std::string& key) {
  int32_t magic = 0, length = 0;
  if (!ReadAll(fd, &magic, 4) || magic != kRPCMagic) return false;
  if (!ReadAll(fd, &length, 4) || length < 0 || length > 4096) return false;
  std::string client(static_cast<size_t>(length), '\0');
  if (!ReadAll(fd, &client[0], client.size())) return false;
  std::string first = client.substr(0, client.find(' '));
  if (first != "client:" + key) {
    WriteAll(fd, &kRPCMismatch, 4);
    return false;
  }
  std::string reply = "server:" + key;
  int32_t reply_length = static_cast<int32_t>(reply.size());
  return WriteAll(fd, &kRPCMagic, 4) && WriteAll(fd, &reply_length, 4) && WriteAll(fd, reply.data(), reply.size());
}

// The session over two of this program's functions: send(bytes) -> count sent, recv(n) -> up to
// n bytes (none: closed).
void ServeThroughFunctions(int fd) {
  using tvm::runtime::PackedFunc;
  using tvm::runtime::TVMArgs;
  using tvm::runtime::TVMRetValue;
  PackedFunc fsend([fd](TVMArgs args, TVMRetValue* rv) {
    std::string data = args[0];
    *rv = static_cast<int64_t>(WriteAll(fd, data.data(), data.size()) ? data.size() : -1);
  });
  PackedFunc frecv([fd](TVMArgs args, TVMRetValue* rv) {
    int64_t size = args[0];
    std::string buffer(static_cast<size_t>(size), '\0');
    ssize_t n = recv(fd, &buffer[0], buffer.size(), 0);
    buffer.resize(n > 0 ? static_cast<size_t>(n) : 0);
    *rv = TVMByteArray{buffer.data(), buffer.size()};
  });
  tvm::runtime::RPCServerLoop(fsend, frecv);
  close(fd);
}

}  // namespace

TVM_REGISTER_GLOBAL("tvm.rpc.server.workpath").set_body_typed([](std::string name) { return WorkPath(name); });

TVM_REGISTER_GLOBAL("tvm.rpc.server.load_module").set_body_typed([](std::string name) {
  return tvm::runtime::Module::LoadFromFile(WorkPath(name), "");
});

TVM_REGISTER_GLOBAL("tvm.rpc.server.listdir").set_body_typed([](std::string) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(g_work_dir.c_str())) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') names.push_back(g_work_dir + "/" + entry->d_name);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  std::string listing;
  for (const std::string& n : names) listing += n + ",";
  return listing;
});

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s <port> <key> [fd|funcs]\n", argv[0]);
    return 2;
  }
  const bool through_functions = argc == 4 && std::strcmp(argv[3], "funcs") == 0;
  char dir_template[] = "/tmp/rpc_cxx_server.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return 1;
  g_work_dir = dir_template;

  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[1])));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener, 4) != 0) {
    std::perror("rpc_server: bind");
    return 1;
  }
  const std::string key = argv[2];
  // No SA_RESTART: a stop interrupts accept and waitpid, and the loop sees it.
  struct sigaction stop {};
  stop.sa_handler = OnStop;
  sigemptyset(&stop.sa_mask);
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  while (!g_stop) {
    int conn = accept(listener, nullptr, nullptr);
    if (conn < 0) continue;
    if (!Handshake(conn, key)) {
      close(conn);
      continue;
    }
    // Each session in a child: a kernel that crashes ends the session, not the server.
    pid_t pid = fork();
    if (pid == 0) {
      // A session ends at a stop as it always did (the default action).
      signal(SIGTERM, SIG_DFL);
      signal(SIGINT, SIG_DFL);
      close(listener);
      if (through_functions) {
        ServeThroughFunctions(conn);
      } else {
        tvm::runtime::RPCServerLoop(conn);
      }
      _exit(0);
    }
    close(conn);
    int status = 0;
    // Stopped while a session runs: the session goes too (it may not have had the signal).
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      if (g_stop) kill(pid, SIGTERM);
    }
  }
  close(listener);
  nftw(g_work_dir.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}
