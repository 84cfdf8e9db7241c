#include "exec/view_ssh.hpp"

#include <catch2/catch.hpp>
#include <string>

using namespace sluice::exec;

namespace {

const std::string gateway_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPO07NApcLg+wz/XbF9S/1Q6m1zRo2MhXLL971pmMfPy";
const std::string real_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFPYsUC2hK9LjwvSr/0sLgf/M2Z7KvsGroL7e6ntKDiV";
const std::string gateway_lines = "git.test " + gateway_key + "\n[git.test]:2222 " + gateway_key + "\n";
const std::string note = "# sluice: the SSH hosts of the policy are served by sluice with this command's host key\n";
const std::string host_note = "# the host's /etc/ssh/ssh_known_hosts, without entries for those hosts\n";

} // namespace

TEST_CASE("the view's known hosts: the gateway's lines alone without a host file", "[exec][ssh]") {
  CHECK(merge_known_hosts("", gateway_lines) == note + gateway_lines);
}

TEST_CASE("the view's known hosts: the host's entries for served names give way to the gateway's", "[exec][ssh]") {
  std::string host = "# the host's comment\n"
                     "GIT.test " + real_key + "\n"                     // any case
                     "[git.test]:2222 " + real_key + " port\n"          // another port, served
                     "[git.test]:2200 " + real_key + "\n"               // a port not served: kept
                     "git.test,alias.test,10.0.0.1 " + real_key + " c\n" // the other names kept
                     "other.test " + real_key + "\n"
                     "\n"
                     "@cert-authority git.test,*.test " + real_key + "\n"
                     "@revoked git.test " + real_key + "\n"
                     "*.test " + real_key + "\n";                        // a wildcard stays
  std::string want = note + gateway_lines + host_note +
                     "# the host's comment\n"
                     "[git.test]:2200 " + real_key + "\n"
                     "alias.test,10.0.0.1 " + real_key + " c\n"
                     "other.test " + real_key + "\n"
                     "\n"
                     "@cert-authority *.test " + real_key + "\n"
                     "*.test " + real_key + "\n";
  CHECK(merge_known_hosts(host, gateway_lines) == want);
}

TEST_CASE("the view's known hosts: hashed entries for served names go, others stay", "[exec][ssh]") {
  // ssh-keygen -H of git.test, [git.test]:2222 and other.test.
  std::string host = "|1|Txvp+I0n0K3+RPZTF51xu9Q0MrQ=|ciudZQ6YEVHXAf37qnHVQ5K9JDg= " + real_key + "\n"
                     "|1|du8D0xjMOCxO65pX+bEy03FMlv8=|bkiO8DSwhC5s+7HlOnMolxa/E7s= " + real_key + "\n"
                     "|1|uZ0Ypcbuldjsga23rkWeE+8Qvbo=|iyzB+22gsPRyKaDy6qqBuV/AJKE= " + real_key + "\n"
                     "|1|not base64|x " + real_key; // no final newline
  std::string want = note + gateway_lines + host_note +
                     "|1|uZ0Ypcbuldjsga23rkWeE+8Qvbo=|iyzB+22gsPRyKaDy6qqBuV/AJKE= " + real_key + "\n"
                     "|1|not base64|x " + real_key + "\n";
  CHECK(merge_known_hosts(host, gateway_lines) == want);
}
