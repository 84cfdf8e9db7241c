"""A tiny authoritative DNS server for tests, on loopback UDP. Answers A records from argv
(name=ip,...) and NXDOMAIN for everything else. `rebind.test` alternates between two answers."""
import os
import socket
import struct
import sys


def parse_name(data, off):
    labels = []
    while data[off] != 0:
        n = data[off]
        labels.append(data[off + 1:off + 1 + n].decode().lower())
        off += n + 1
    return ".".join(labels), off + 1


def main():
    port = int(sys.argv[1])
    records = {}
    for item in sys.argv[2:]:
        name, ips = item.split("=")
        records[name] = ips.split(",")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((os.environ.get("DNS_HOST", "127.0.0.1"), port))
    print("ready", flush=True)
    counter = {}
    while True:
        data, addr = sock.recvfrom(512)
        if len(data) < 12:
            continue
        qid, flags, qd = struct.unpack("!HHH", data[:6])
        name, off = parse_name(data, 12)
        qtype, qclass = struct.unpack("!HH", data[off:off + 4])
        question = data[12:off + 4]
        answers = []
        rcode = 3
        if name in records:
            rcode = 0
            ips = records[name]
            if name.startswith("rebind"):
                i = counter.get(name, 0)
                counter[name] = i + 1
                ips = [ips[i % len(ips)]]
            if qtype == 1:
                for ip in ips:
                    answers.append(b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 0, 4) + socket.inet_aton(ip))
        header = struct.pack("!HHHHHH", qid, 0x8400 | rcode, 1, len(answers), 0, 0)
        sock.sendto(header + question + b"".join(answers), addr)


if __name__ == "__main__":
    main()
