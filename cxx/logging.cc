// Logging, TVM_LOG_DEBUG and the odds and ends the headers' inline code reaches.

#include "runtime.h"

using namespace tvm::runtime;
using namespace tvmrt;

// ---------------------------------------------------------------------------------------------
// Odds and ends the headers' inline code reaches.

bool tvm::runtime::RuntimeEnabled(const String& target) {
  std::string t = target.str();
  return t == "cpu" || t == "llvm" || t == "c" || t.rfind("llvm ", 0) == 0;
}

void tvm::runtime::EnvCheckSignals() {}

std::string tvm::runtime::Backtrace() { return std::string(); }

std::string tvm::runtime::GetCustomTypeName(uint8_t type_code) {
  throw InternalError("libtvm_runtime.so", 0,
                      "ValueError: custom data type " + std::to_string(type_code) + " is not registered");
}

bool tvm::runtime::GetCustomTypeRegistered(uint8_t) { return false; }

uint8_t tvm::runtime::ParseCustomDatatype(const std::string& s, const char**) {
  throw InternalError("libtvm_runtime.so", 0, "ValueError: custom data types are not supported: " + s);
}

detail::LogFatal::Entry& detail::LogFatal::GetEntry() {
  static thread_local Entry entry;
  return entry;
}

const char* detail::LogMessage::level_strings_[] = {": Debug: ", ": ", ": Warning: ", ": Error: "};

// ---------------------------------------------------------------------------------------------
// TVM_LOG_DEBUG: "1" enables DLOG; "FILE=LEVEL,..." (FILE relative to a src/ folder, or DEFAULT)
// enables DLOG and VLOG up to LEVEL in FILE.

namespace {
// A file name as VLOG settings name it: the part after the last "/src/", if any.
std::string CanonicalFile(const std::string& file) {
  size_t at = file.rfind("/src/");
  if (at != std::string::npos) return file.substr(at + 5);
  if (file.rfind("src/", 0) == 0) return file.substr(4);
  return file;
}
}  // namespace

detail::TvmLogDebugSettings detail::TvmLogDebugSettings::ParseSpec(const char* opt_spec) {
  TvmLogDebugSettings settings;
  if (opt_spec == nullptr) return settings;
  std::string spec(opt_spec);
  if (spec.empty() || spec == "0") return settings;
  settings.dlog_enabled_ = true;
  if (spec == "1") return settings;
  // Entries are FILE=LEVEL separated by commas, read the way upstream reads them (getline to '='
  // then to ','), so an ill-formed spec is reported at the position upstream reports: where the
  // stream stands after the failing read, or, once it reached the end, the length of the spec
  // less what the last read took.
  size_t at = 0;
  bool at_end = false;
  // Reads up to `delim` (consumed) or to the end; false when nothing is left to read.
  auto read_until = [&](char delim, std::string* out) {
    if (at_end || at >= spec.size()) {
      at_end = true;
      out->clear();
      return false;
    }
    size_t stop = spec.find(delim, at);
    if (stop == std::string::npos) {
      *out = spec.substr(at);
      at = spec.size();
      at_end = true;
    } else {
      *out = spec.substr(at, stop - at);
      at = stop + 1;
    }
    return true;
  };
  auto position = [&](const std::string& last_read) { return at_end ? spec.size() - last_read.size() : at; };
  auto ill_formed = [&](const std::string& last_read, const std::string& what) {
    throw InternalError("libtvm_runtime.so", 0,
                        "TVM_LOG_DEBUG ill-formed at position " + std::to_string(position(last_read)) + ": " + what);
  };
  std::string name, level;
  while (read_until('=', &name)) {
    if (name.empty()) ill_formed(name, "empty filename");
    name = CanonicalFile(name);
    if (!read_until(',', &level)) ill_formed(level, "expecting \"=<level>\" after \"" + name + "\"");
    if (level.empty()) ill_formed(level, "empty level after \"" + name + "\"");
    char* end = nullptr;
    long value = std::strtol(level.c_str(), &end, 10);
    if (end != level.c_str() + level.size()) ill_formed(level, "invalid level: \"" + level + "\"");
    // The first setting of a file wins, as upstream's.
    settings.vlog_level_map_.emplace(name, static_cast<int>(value));
  }
  return settings;
}

bool detail::TvmLogDebugSettings::VerboseEnabledImpl(const std::string& filename, int level) const {
  auto it = vlog_level_map_.find(CanonicalFile(filename));
  if (it == vlog_level_map_.end()) it = vlog_level_map_.find("DEFAULT");
  return it != vlog_level_map_.end() && level <= it->second;
}
