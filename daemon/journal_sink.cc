#include "daemon/journal_sink.h"

#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

// The records' own source locations, not this file's, are the ones to send.
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>

namespace depot {
namespace {

int Priority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return LOG_DEBUG;
    case spdlog::level::info:
      return LOG_INFO;
    case spdlog::level::warn:
      return LOG_WARNING;
    case spdlog::level::err:
      return LOG_ERR;
    default:
      return LOG_CRIT;
  }
}

}  // namespace

bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  return ::fstat(STDERR_FILENO, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

void JournalSink::sink_it_(const spdlog::details::log_msg& msg) {
  const auto& text = msg.payload;
  int size = static_cast<int>(text.size());
  if (msg.source.empty()) {
    sd_journal_send("MESSAGE=%.*s", size, text.data(), "PRIORITY=%d", Priority(msg.level),
                    "SYSLOG_IDENTIFIER=depotd", "DEPOT_SOCKET=%s", socket_path_.c_str(),
                    "DEPOT_VERSION=%s", DEPOT_VERSION, nullptr);
  } else {
    sd_journal_send("MESSAGE=%.*s", size, text.data(), "PRIORITY=%d", Priority(msg.level),
                    "SYSLOG_IDENTIFIER=depotd", "DEPOT_SOCKET=%s", socket_path_.c_str(),
                    "DEPOT_VERSION=%s", DEPOT_VERSION, "CODE_FILE=%s", msg.source.filename,
                    "CODE_LINE=%d", msg.source.line, "CODE_FUNC=%s", msg.source.funcname, nullptr);
  }
}

}  // namespace depot
