#!/usr/bin/python3
"""Exchanges bytes through a SOCKS5 proxy with PySocks (python3-socks).

usage: exchange_pysocks.py client PROXY_PORT HOST PORT MIB
         sends MIB MiB of seeded pseudo-random bytes to HOST:PORT through the
         SOCKS5 proxy on 127.0.0.1:PROXY_PORT (the name resolved by the
         proxy), reads back as many, and checks the SHA-256 of both ways
         against the echo; prints "ok SENT_HEX RECEIVED_HEX".
       exchange_pysocks.py echo PORT
         echoes every connection on 127.0.0.1:PORT.
"""
import hashlib
import random
import socket
import sys
import threading

import socks


def echo(port):
    srv = socket.create_server(("127.0.0.1", port))
    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def serve(c):
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        c.sendall(b)
    c.shutdown(socket.SHUT_WR)
    c.close()


def client(proxy_port, host, port, mib):
    s = socks.socksocket()
    s.set_proxy(socks.SOCKS5, "127.0.0.1", proxy_port, rdns=True)
    s.settimeout(120)
    s.connect((host, port))
    total = mib << 20
    sent = hashlib.sha256()

    def send():
        rng = random.Random(7)
        left = total
        while left > 0:
            block = rng.randbytes(min(1 << 20, left))
            sent.update(block)
            s.sendall(block)
            left -= len(block)
        s.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=send)
    t.start()
    got = hashlib.sha256()
    n = 0
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got.update(b)
        n += len(b)
    t.join()
    if n != total or got.digest() != sent.digest():
        sys.exit("exchange: got %d of %d bytes, sha256 %s, sent %s" % (n, total, got.hexdigest(), sent.hexdigest()))
    print("ok", sent.hexdigest(), got.hexdigest())


if sys.argv[1] == "echo":
    echo(int(sys.argv[2]))
else:
    client(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
