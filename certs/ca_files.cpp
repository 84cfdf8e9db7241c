#include "certs/ca_files.hpp"
#include "certs/certificate_authority.hpp"

#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace sluice::certs {
namespace {

void write_file(const std::string &path, const std::string &data, mode_t mode, bool force) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
  int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    throw crypto_error("cannot create '" + path + "': " + std::string(strerror(errno)) +
                       (errno == EEXIST ? "; pass --force to replace it" : ""));
  }
  ::fchmod(fd, mode);
  bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  ::close(fd);
  if (!ok) throw crypto_error("cannot write '" + path + "'");
}

} // namespace

void write_ca_files(const std::string &cert_file, const std::string &key_file, int days,
                    const std::string &common_name, bool force) {
  if (days < 1 || days > 3650) {
    throw crypto_error("--days " + std::to_string(days) + " is out of range; use 1 to 3650");
  }
  auto ca = certificate_authority::generate(common_name, std::chrono::hours(24 * days), {});
  write_file(key_file, ca.key_pem(), 0600, force);
  write_file(cert_file, ca.cert_pem(), 0644, force);
}

std::string describe_ca(const std::string &cert_file) {
  std::ifstream f(cert_file);
  if (!f) throw crypto_error("cannot read '" + cert_file + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  auto cert = x509_from_pem(ss.str());
  bio_ptr b(BIO_new(BIO_s_mem()));
  BIO_printf(b.get(), "subject:     ");
  X509_NAME_print_ex(b.get(), X509_get_subject_name(cert.get()), 0, XN_FLAG_ONELINE);
  BIO_printf(b.get(), "\nnot before:  ");
  ASN1_TIME_print(b.get(), X509_get0_notBefore(cert.get()));
  BIO_printf(b.get(), "\nnot after:   ");
  ASN1_TIME_print(b.get(), X509_get0_notAfter(cert.get()));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  X509_digest(cert.get(), EVP_sha256(), md, &n);
  BIO_printf(b.get(), "\nsha256:      ");
  for (unsigned i = 0; i < n; ++i) BIO_printf(b.get(), "%s%02X", i ? ":" : "", md[i]);
  int idx = X509_get_ext_by_NID(cert.get(), NID_name_constraints, -1);
  BIO_printf(b.get(), "\nconstraints: ");
  if (idx < 0) {
    BIO_printf(b.get(), "none");
  } else {
    BIO_printf(b.get(), "\n");
    X509V3_EXT_print(b.get(), X509_get_ext(cert.get(), idx), 0, 4);
  }
  BIO_printf(b.get(), "\n");
  char *data = nullptr;
  long len = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<std::size_t>(len));
}

std::string system_trust_bundle() {
  for (const char *f : {"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"}) {
    std::ifstream in(f);
    if (!in) continue;
    std::stringstream ss;
    ss << in.rdbuf();
    std::string roots = ss.str();
    if (!roots.empty() && roots.back() != '\n') roots += '\n';
    return roots;
  }
  return {};
}

} // namespace sluice::certs
