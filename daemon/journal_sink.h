// Logging to the systemd journal: a spdlog sink that sends each record with structured fields
// (sd_journal_send), so that `journalctl -u depotd -p warning` filters by priority and
// `journalctl DEPOT_SOCKET=/run/depot/depot.sock` picks one daemon out of several. Used only when
// depotd's stderr is the journal (StderrIsJournal); elsewhere depotd logs to stderr as before.
//
// Fields: MESSAGE, PRIORITY (syslog's, from the spdlog level), SYSLOG_IDENTIFIER=depotd,
// DEPOT_SOCKET, DEPOT_VERSION, and CODE_FILE/CODE_LINE/CODE_FUNC when the record has a source
// location.
//
// Thread-safe (spdlog's mutex); the daemon logs from its one loop thread anyway.
#ifndef DEPOT_DAEMON_JOURNAL_SINK_H_
#define DEPOT_DAEMON_JOURNAL_SINK_H_

#include <spdlog/sinks/base_sink.h>

#include <mutex>
#include <string>

namespace depot {

// True when stderr is the stream systemd connected to the journal: $JOURNAL_STREAM names its
// device and inode ("dev:ino"), as systemd.exec(5) says to check.
bool StderrIsJournal();

class JournalSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit JournalSink(std::string socket_path) : socket_path_(std::move(socket_path)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  std::string socket_path_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_JOURNAL_SINK_H_
