// FdStore is the service manager's file descriptor store as depotd uses it: descriptors handed to
// systemd (FDSTORE=1 with FDNAME=, through sd_pid_notify_with_fds) are kept there while a restart
// of the service is queued, which both `systemctl restart` and Restart=on-failure after a crash
// do, and passed to the next depotd beside its socket (LISTEN_FDS, named in LISTEN_FDNAMES).
// depotd stores the descriptor of every host segment and device chunk and of each namespace's
// catalog there, so
// that a new daemon finds the same memory with the objects in it (see KeptMemory), and removes
// each (FDSTOREREMOVE=1) when the segment is given back, so that systemd never keeps memory the
// daemon no longer accounts for.
//
// Off outside systemd (NOTIFY_SOCKET unset) and with keep_memory = off: then every call does
// nothing. At most kMaxStored descriptors are stored (fewer when systemd says its limit, FDSTORE=
// in the environment of systemd 254 and later): systemd passes their names back in one
// environment variable, LISTEN_FDNAMES, and exec refuses a variable past 128 KiB, so a store of
// many more would keep the next depotd from starting at all; for the same reason their names take
// at most kMaxNameBytes in all (a device chunk's name is longer than a host segment's). Past
// either cap, Keep refuses and says so once in the log; what it would have kept is lost at a
// restart.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_FD_STORE_H_
#define DEPOT_DAEMON_FD_STORE_H_

#include <cstdint>
#include <string>
#include <unordered_set>

namespace depot {

class FdStore {
 public:
  // Off unless `wanted` and the service manager listens.
  explicit FdStore(bool wanted);
  bool on() const { return on_; }

  // LISTEN_FDNAMES of this many names of depotd's (34 bytes at most with their ':') stays
  // under 128 KiB; FileDescriptorStoreMax= in depotd.service allows a few more.
  static constexpr uint64_t kMaxStored = 3000;
  static constexpr uint64_t kMaxNameBytes = uint64_t{120} << 10;  // with a ':' after each

  // Hands a duplicate of `fd` to the store under `name` (printable, no ':', at most 255 bytes).
  // False when it is off, full (see the class comment) or the message could not be sent.
  bool Keep(const std::string& name, int fd);
  // Removes the descriptor stored under `name` (nothing when none is).
  void Forget(const std::string& name);
  // `name` is in the store already: systemd passed it to this daemon (LISTEN_FDNAMES).
  void Passed(const std::string& name) {
    if (on_ && stored_.insert(name).second) name_bytes_ += name.size() + 1;
  }

  // Whether a descriptor is stored under `name`.
  bool Has(const std::string& name) const { return stored_.contains(name); }
  // Descriptors stored now, as counted here.
  uint64_t stored() const { return stored_.size(); }

 private:
  bool on_ = false;
  uint64_t limit_ = kMaxStored;
  std::unordered_set<std::string> stored_;
  uint64_t name_bytes_ = 0;  // of the names in stored_, each with its ':'

  bool warned_ = false;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_FD_STORE_H_
