// The `certs` commands of the serial console (image/console.hh passes each line that starts with "certs"
// here, on the console's own thread, and prints the result):
//
//   certs list [OFFSET] [LIMIT]    hosts with a certificate, in the store's stable order (LIMIT default 20)
//   certs show HOST                the certificate's description (subject, issuer, dates, key type,
//                                  SHA-256 fingerprint), read from its file (blocking: this is not a loop)
//   certs count                    number of hosts in the store
//
// Read-only: certificates are changed through the admin API (which validates and waits for the disk).
#pragma once

#include <string>
#include <string_view>

namespace kosoku::certs {

class CertStore;

/// Runs one console line on the process's store. Returns the text to print (ends with '\n').
std::string console_command(std::string_view line);
/// The same on a given store (tests).
std::string console_command(CertStore& store, std::string_view line);

}  // namespace kosoku::certs
