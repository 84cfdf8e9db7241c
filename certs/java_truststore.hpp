#pragma once
#include <openssl/x509.h>
#include <string>

namespace sluice::certs {

// A PKCS12 trust store holding `cert` as a trusted certificate entry, in the form Java's keystore
// reads (the Oracle trusted-key-usage attribute), without running keytool. exec's view shows it as
// the JVM's system `cacerts`; the certificates are not encrypted, so a JVM reads them with no
// password (the MAC uses `password`).
std::string make_java_truststore(X509 *cert, const std::string &password);

} // namespace sluice::certs
