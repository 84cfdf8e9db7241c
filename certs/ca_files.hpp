#pragma once
#include <string>

namespace sluice::certs {

// `sluice ca init`: a persistent CA for `serve` (ECDSA P-256, no name constraints: the allowlist of a
// long-lived proxy changes on reload). The key file is created 0600 and never overwritten unless
// `force` is set.
void write_ca_files(const std::string &cert_file, const std::string &key_file, int days,
                    const std::string &common_name, bool force);

// `sluice ca show`: subject, validity, SHA-256 fingerprint and name constraints of a CA file.
std::string describe_ca(const std::string &cert_file);

// The system's trust bundle (Debian's ca-certificates.crt, else the Red Hat path), ending in a
// newline so that a PEM can follow it; empty when there is none.
std::string system_trust_bundle();

} // namespace sluice::certs
