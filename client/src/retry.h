// Calls that may run twice: run on the connection now and, when depotd went away during the call,
// once more on the connection that replaced it (Link::Recover). For reads, whose second run
// answers as the first would have; a change is retried only where a second run cannot do it
// twice (see Client::Put and Client::Delete).
#ifndef DEPOT_CLIENT_SRC_RETRY_H_
#define DEPOT_CLIENT_SRC_RETRY_H_

#include <vector>

#include "client/src/link.h"
#include "depot/status.h"

namespace depot::internal {

// The status a call's result carries: its own, or a batch's first (a lost connection fails every
// element alike).
inline Status StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}
template <typename T>
Status StatusOf(const std::vector<T>& v) {
  return v.empty() ? Status::OK() : StatusOf(v.front());
}

// Sets the status of a call's result (each element of a batch) to `st`.
inline void SetStatus(Status& out, const Status& st) { out = st; }
template <typename T>
void SetStatus(Result<T>& out, const Status& st) {
  out = st;
}
template <typename T>
void SetStatus(std::vector<T>& out, const Status& st) {
  for (T& each : out) SetStatus(each, st);
}

// `call(Connection&)`, and once more on the next connection when the first answered that the
// daemon went away (when no next one could be reached, the result says why). `retried`, when
// given, says whether it ran twice.
template <typename Call>
auto Retry(Link& link, Call call, bool* retried = nullptr) {
  Connection& conn = link.now();
  auto out = call(conn);
  if (Status st = StatusOf(out); st.IsDisconnected()) {
    if (auto next = link.Recover(conn, st); next.ok()) {
      out = call(**next);
      if (retried != nullptr) *retried = true;
    } else {
      SetStatus(out, next.status());
    }
  }
  return out;
}

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_RETRY_H_
