// FdStore is the service manager's file descriptor store as depotd uses it: descriptors handed to
// systemd (FDSTORE=1 with FDNAME=, through sd_pid_notify_with_fds) are kept there while a restart
// of the service is queued, which both `systemctl restart` and Restart=on-failure after a crash
// do, and passed to the next depotd beside its socket (LISTEN_FDS, named in LISTEN_FDNAMES).
// depotd stores the descriptor of every host segment and of each namespace's catalog there, so
// that a new daemon finds the same memory with the objects in it (see KeptMemory), and removes
// each (FDSTOREREMOVE=1) when the segment is given back, so that systemd never keeps memory the
// daemon no longer accounts for.
//
// Off outside systemd (NOTIFY_SOCKET unset) and with keep_memory = off: then every call does
// nothing. The unit must allow enough descriptors (FileDescriptorStoreMax=): systemd refuses
// the rest and logs it, and the daemon, which hears nothing back, says so in its own log once the
// count it stored passes the limit it was told (FDSTORE= in its environment, systemd 254 and
// later).
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_FD_STORE_H_
#define DEPOT_DAEMON_FD_STORE_H_

#include <cstdint>
#include <optional>
#include <string>

namespace depot {

class FdStore {
 public:
  // Off unless `wanted` and the service manager listens.
  explicit FdStore(bool wanted);
  bool on() const { return on_; }

  // Hands a duplicate of `fd` to the store under `name` (printable, no ':', at most 255 bytes).
  void Keep(const std::string& name, int fd);
  // Removes every descriptor stored under `name`.
  void Forget(const std::string& name);

  // Descriptors stored now, as counted here.
  uint64_t stored() const { return stored_; }

 private:
  bool on_ = false;
  uint64_t stored_ = 0;
  std::optional<uint64_t> limit_;  // FDSTORE=, where systemd says it
  bool warned_ = false;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_FD_STORE_H_
