#!/usr/bin/env python3
"""Offers `jasper watch` release reports as fast as this process can send them, as the
gateways of a plan would (gateway ids FIRST..FIRST+N, 28 releases a report, packets
numbered from 1): a measure of how many records a second the watch takes.

    jasper plan -n 1000 --out c1000.toml        # gateways 111..1110
    jasper watch --config c1000.toml --listen 127.0.0.1:9910 --duration 11 --warmup 0 &
    scripts/watch_flood.py 8 --first 111 --gateways 1000 --to 127.0.0.1:9910

Compare the records it sent with the watch's `input:` line (and the watch's CPU time).
The layout is `wire::report`'s."""
import argparse
import socket
import struct
import time

RECORDS = 28


def report(gateway, first, session, seq):
    header = (struct.pack(">BBHI", 0xFB, 1, RECORDS, gateway) + session + b"\0\0"
              + struct.pack(">Q", seq))
    records = b"".join(
        struct.pack(">QQHB5xQQQ", p, 2 * p, 1, 0, p * 200_000, p * 200_000 + 80_000,
                    p * 200_000 + 200_000 + gateway)
        for p in range(first, first + RECORDS))
    return header + records


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seconds", type=float)
    parser.add_argument("--first", type=int, default=111, help="the first gateway's id")
    parser.add_argument("--gateways", type=int, default=1000)
    parser.add_argument("--to", default="127.0.0.1:9910")
    parser.add_argument("--session", default="JASPER0001")
    args = parser.parse_args()
    host, port = args.to.rsplit(":", 1)
    session = args.session.encode().ljust(10)[:10]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent, packet, start = 0, 1, time.time()
    while time.time() - start < args.seconds:
        for gateway in range(args.first, args.first + args.gateways):
            # Report k of every gateway carries packets 28(k-1)+1..28k: numbered k.
            seq = (packet - 1) // RECORDS + 1
            sock.sendto(report(gateway, packet, session, seq), (host, int(port)))
            sent += 1
        packet += RECORDS
    print(f"reports {sent} records {sent * RECORDS} packets {packet - 1} "
          f"in {time.time() - start:.2f} s")


if __name__ == "__main__":
    main()
