#pragma once
#include <openssl/x509.h>
#include <string>

namespace sluice::certs {

// A PKCS12 trust store holding `cert` as a trusted certificate entry, in the form Java's keystore
// reads (the Oracle trusted-key-usage attribute), so that JAVA_TOOL_OPTIONS can point a JVM at the
// per-command CA without running keytool.
std::string make_java_truststore(X509 *cert, const std::string &password);

} // namespace sluice::certs
