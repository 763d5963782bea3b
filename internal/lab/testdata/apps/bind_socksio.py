#!/usr/bin/python3
"""A SOCKS5 BIND round trip driven by socksio (python3-socksio), a SOCKS
implementation not written by gridlink: its request encoder sends the BIND
command and its reply parser reads both replies.

usage: bind_socksio.py PROXY_HOST PROXY_PORT PEER
PEER (NAME.grid) is the expected peer, the BIND's DST.ADDR: gridlink socks
admits no other. Prints "bound HOST PORT" once the proxy listens, waits for the peer, reads
what it sends until EOF, answers "sha256 HEX\n" and prints "peer HOST PORT".
"""
import hashlib
import socket
import sys

from socksio import socks5

proxy = (sys.argv[1], int(sys.argv[2]))
peer = sys.argv[3]
s = socket.create_connection(proxy, timeout=60)
conn = socks5.SOCKS5Connection()
conn.send(socks5.SOCKS5AuthMethodsRequest([socks5.SOCKS5AuthMethod.NO_AUTH_REQUIRED]))
s.sendall(conn.data_to_send())
reply = conn.receive_data(s.recv(2))
assert reply.method == socks5.SOCKS5AuthMethod.NO_AUTH_REQUIRED, reply


def read_reply():
    head = b""
    while len(head) < 5:
        chunk = s.recv(5 - len(head))
        if not chunk:
            sys.exit("proxy closed during a reply")
        head += chunk
    atype = head[3]
    rest = {1: 4 + 2, 4: 16 + 2, 3: head[4] + 2}[atype] - (0 if atype == 3 else 1)
    data = head
    while len(data) < 5 + rest:
        data += s.recv(5 + rest - len(data))
    return socks5.SOCKS5Reply.loads(data)


def host_of(r):
    # socksio leaves a domain name's length byte on the name
    if r.atype == socks5.SOCKS5AType.DOMAIN_NAME:
        return r.addr[1:]
    return r.addr


conn.send(socks5.SOCKS5CommandRequest.from_address(socks5.SOCKS5Command.BIND, (peer, 0)))
s.sendall(conn.data_to_send())
first = read_reply()
if first.reply_code != socks5.SOCKS5ReplyCode.SUCCEEDED:
    sys.exit("BIND refused: %s" % first.reply_code)
print("bound", host_of(first), first.port, flush=True)
second = read_reply()
if second.reply_code != socks5.SOCKS5ReplyCode.SUCCEEDED:
    sys.exit("BIND: no peer: %s" % second.reply_code)
h = hashlib.sha256()
while True:
    b = s.recv(65536)
    if not b:
        break
    h.update(b)
s.sendall(("sha256 %s\n" % h.hexdigest()).encode())
s.shutdown(socket.SHUT_WR)
print("peer", host_of(second), second.port, flush=True)
