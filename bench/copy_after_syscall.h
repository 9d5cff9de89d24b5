// CopyAfterSyscall times what a system call costs the memcpy right after it on this host, for
// section 3 to print beside its puts (each timed right after a round trip, as a producer's puts
// come between its other calls): a copy in a loop of copies, and a copy right after getppid(),
// with the source and the destination on 4 KiB pages, then on one 2 MiB page each (transparent
// huge pages, where the kernel gives them), alternating: what entering the kernel costs the next
// copy on this host (where the kernel isolates its page tables on a CPU without PCID, every entry
// empties the TLB), a cost of the host that no put can avoid.
#ifndef DEPOT_BENCH_COPY_AFTER_SYSCALL_H_
#define DEPOT_BENCH_COPY_AFTER_SYSCALL_H_

#include <cstddef>

namespace depot::bench {

struct CopyCosts {
  // Median seconds of one copy: in a loop, right after a system call; on 4 KiB and 2 MiB pages.
  double loop_small = 0, after_small = 0, loop_huge = 0, after_huge = 0;
  bool huge = false;  // the kernel gave the 2 MiB buffers huge pages
};

CopyCosts CopyAfterSyscall(size_t bytes, int samples);

}  // namespace depot::bench

#endif  // DEPOT_BENCH_COPY_AFTER_SYSCALL_H_
