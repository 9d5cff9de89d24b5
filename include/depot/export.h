// DEPOT_API marks what libdepot.so exports: the classes and functions of depot's public C++ API.
// The library is built with hidden visibility, so that nothing else of it (its internals, the
// protocol, the helpers it shares with the daemon) becomes part of the ABI that libdepot0
// promises (docs/cpp-api.md, "ABI").
#ifndef DEPOT_EXPORT_H_
#define DEPOT_EXPORT_H_

#define DEPOT_API __attribute__((visibility("default")))

#endif  // DEPOT_EXPORT_H_
