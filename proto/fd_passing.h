// File descriptors that travel over a Unix socket with SCM_RIGHTS.
// This is the only place in depot that builds or parses control messages.
#ifndef DEPOT_PROTO_FD_PASSING_H_
#define DEPOT_PROTO_FD_PASSING_H_

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <vector>

#include "common/unique_fd.h"

namespace depot::proto {

// One sendmsg(2) of `data` with `fds` attached (at most kMaxFdsPerSend). `flags` are added to
// MSG_NOSIGNAL. Returns the bytes sent, or -1 with errno set. With fds attached, at least one byte
// must be sent; the fds travel with the first byte.
ssize_t SendWithFds(int sock, std::span<const uint8_t> data, std::span<const int> fds, int flags);

// One recvmsg(2) into `data`. Received fds (close-on-exec) are appended to `fds` in the order
// they were sent. Returns the bytes received, 0 at end of stream, or -1 with errno set. A control
// message truncated by the kernel (MSG_CTRUNC) is reported as -1 with errno EMSGSIZE.
ssize_t RecvWithFds(int sock, std::span<uint8_t> data, std::vector<UniqueFd>& fds, int flags);

}  // namespace depot::proto

#endif  // DEPOT_PROTO_FD_PASSING_H_
