#!/usr/bin/python3
"""A gRPC client in Python that finds its servers through xDS, as any
non-Go client of Muster's control plane would: grpcio (the C-core's xDS
resolver and balancers), no Muster code, no generated stubs.

Usage: client.py [target] [interval-ms] [name=value ...]
  target       default xds:///greeter
  interval-ms  pause between two calls, default 5
  name=value   metadata sent on every call (e.g. x-muster-color=blue);
               "{n}" in a value is replaced by the call's number

The bootstrap comes from GRPC_XDS_BOOTSTRAP (a file) or
GRPC_XDS_BOOTSTRAP_CONFIG (the JSON itself), read by the C-core.

It calls muster.demo.greeter.v1.Greeter/SayHello in a loop, one call at a
time, and prints one JSON line per call on stdout, as the Node client does:
  {"n": 1, "ok": true, "by": "127.0.0.1:40001"}       served_by of the reply
  {"n": 2, "ok": false, "code": 14, "error": "..."}   a failed call
Requests and replies are raw protobuf bytes (no serializers), encoded and
decoded by hand below. It exits when its stdin ends (the parent test is
gone) or on SIGTERM/SIGINT.
"""

import json
import signal
import sys
import threading

import grpc

METHOD = "/muster.demo.greeter.v1.Greeter/SayHello"

# HelloRequest{name: "python"}: field 1, length-delimited.
REQUEST = bytes([0x0A, 6]) + b"python"


def read_varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b & 0x80 == 0:
            return value, pos
        shift += 7


def served_by(buf):
    """Field 2 (served_by) of a serialized HelloReply."""
    pos = 0
    while pos < len(buf):
        tag, pos = read_varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = read_varint(buf, pos)
        elif wire == 2:
            size, pos = read_varint(buf, pos)
            if field == 2:
                return buf[pos:pos + size].decode("utf-8")
            pos += size
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError("unexpected wire type %d" % wire)
    return ""


def main():
    target = sys.argv[1] if len(sys.argv) > 1 else "xds:///greeter"
    interval = float(sys.argv[2] if len(sys.argv) > 2 else 5) / 1000
    pairs = []
    for kv in sys.argv[3:]:
        name, sep, value = kv.partition("=")
        if not sep or not name:
            sys.exit("client.py: %r is not name=value" % kv)
        pairs.append((name, value))

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def watch_stdin():
        sys.stdin.buffer.read()  # returns at EOF: the parent is gone
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()

    with grpc.insecure_channel(target) as channel:
        # No serializers: the request and the reply are bytes as they are.
        call = channel.unary_unary(METHOD)
        n = 0
        while not stop.is_set():
            n += 1
            try:
                md = [(k, v.replace("{n}", str(n))) for k, v in pairs]
                reply = call(REQUEST, timeout=2, metadata=md or None)
                line = {"n": n, "ok": True, "by": served_by(reply)}
            except grpc.RpcError as err:
                line = {"n": n, "ok": False, "code": err.code().value[0],
                        "error": err.details()}
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()
            stop.wait(interval)


if __name__ == "__main__":
    main()
