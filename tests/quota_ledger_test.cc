// Tests for QuotaLedger: what users and connections have created, against their limits.
#include "daemon/quota_ledger.h"

#include <catch2/catch.hpp>
#include <vector>

#include "depot/store_status.h"

namespace depot {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("QuotaLedger counts whether or not limits are set", "[quota]") {
  QuotaLedger ledger({}, {});
  CHECK(ledger.Check(1000, 1, uint64_t{1} << 40).ok());
  ledger.Charge(1000, 1, 100);
  ledger.Charge(1000, 2, 50);
  CHECK(ledger.users().at(1000).bytes == 150);
  CHECK(ledger.users().at(1000).objects == 2);
  CHECK(ledger.OfSession(1).bytes == 100);
  ledger.Credit(1000, 1, 100);
  CHECK(ledger.users().at(1000).objects == 1);
  CHECK(ledger.OfSession(1).objects == 0);
  CHECK(ledger.OfSession(9).objects == 0);
}

TEST_CASE("QuotaLedger refuses past a user's limit, naming the key", "[quota]") {
  QuotaLedger ledger({.bytes = 1000, .objects = 3}, {});
  ledger.Charge(7, 1, 600);
  Status st = ledger.Check(7, 2, 500);  // another connection of the same user
  CHECK(st.IsQuotaExceeded());
  CHECK_THAT(st.message(), Contains("uid 7") && Contains("user_quota_bytes"));
  CHECK(ledger.Check(8, 2, 500).ok());  // another user
  ledger.Charge(7, 1, 1);
  ledger.Charge(7, 2, 1);
  st = ledger.Check(7, 3, 1);
  CHECK_THAT(st.message(), Contains("3 objects") && Contains("user_quota_objects"));
  ledger.Credit(7, 1, 600);
  CHECK(ledger.Check(7, 3, 500).ok());
}

TEST_CASE("QuotaLedger counts an object served again at start against its user alone", "[quota]") {
  QuotaLedger ledger({.bytes = 1000, .objects = 0}, {.bytes = 1000, .objects = 0});
  ledger.ChargeRestored(7, 900);
  CHECK(ledger.users().at(7).bytes == 900);
  CHECK(ledger.users().at(7).objects == 1);
  CHECK(ledger.OfSession(0).objects == 0);  // no connection of this daemon made it
  CHECK(ledger.Check(7, 1, 200).IsQuotaExceeded());
  ledger.Credit(7, 0, 900);  // freed: an object served again has no creating session
  CHECK(ledger.users().at(7).bytes == 0);
  CHECK(ledger.Check(7, 1, 200).ok());
}

TEST_CASE("QuotaLedger refuses past a connection's limit and forgets a closed one", "[quota]") {
  QuotaLedger ledger({}, {.bytes = 100, .objects = 0});
  ledger.Charge(7, 1, 80);
  CHECK_THAT(ledger.Check(7, 1, 30).message(),
             Contains("this connection") && Contains("client_quota_bytes"));
  CHECK(ledger.Check(7, 2, 30).ok());
  ledger.ForgetSession(1);
  CHECK(ledger.Check(7, 1, 30).ok());
  ledger.Credit(7, 1, 80);  // freed after its creator left: the user's count still drops
  CHECK(ledger.users().at(7).bytes == 0);
}

TEST_CASE("QuotaLedger counts a lease's bytes while it is held, and each put's object as it comes",
          "[quota]") {
  QuotaLedger ledger({.bytes = 1000, .objects = 0}, {});
  ledger.ChargeBytes(7, 1, 600);  // a lease: bytes, no object
  CHECK(ledger.users().at(7).bytes == 600);
  CHECK(ledger.users().at(7).objects == 0);
  CHECK(ledger.OfSession(1).bytes == 600);
  // The lease's bytes count against the user, from another connection too.
  CHECK_THAT(ledger.Check(7, 2, 500).message(), Contains("user_quota_bytes"));
  CHECK(ledger.Check(7, 2, 400).ok());
  // A put into the lease: one object more, its bytes already charged with the lease.
  ledger.CountObject(7, 1);
  CHECK(ledger.users().at(7).objects == 1);
  CHECK(ledger.users().at(7).bytes == 600);
  CHECK(ledger.OfSession(1).objects == 1);
  // The lease ends: the bytes it still held are credited, never below zero.
  ledger.CreditBytes(7, 1, 500);
  CHECK(ledger.users().at(7).bytes == 100);
  ledger.CreditBytes(7, 1, 500);
  CHECK(ledger.users().at(7).bytes == 0);
  CHECK(ledger.users().at(7).objects == 1);
  // A user whose bytes are all credited but who still has an object is reported; one without
  // objects is not.
  ledger.ChargeBytes(8, 3, 64);
  StoreStatus st;
  ledger.Report(st);
  CHECK(st.users == std::vector<StoreStatus::UserUsage>{{7, 1, 0}});
  CHECK(st.user_quota_bytes == 1000);
  // Credits of a forgotten session leave it forgotten.
  ledger.ForgetSession(1);
  ledger.CreditBytes(7, 1, 10);
  CHECK(ledger.OfSession(1).bytes == 0);
  CHECK(ledger.OfSession(1).objects == 0);
}

}  // namespace
}  // namespace depot
