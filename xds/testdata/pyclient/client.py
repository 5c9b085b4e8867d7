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
Each line also gives the call's duration in milliseconds, measured here
("ms"). A line "burst N GAP" on stdin makes it, after its current call,
start N calls GAP milliseconds apart (0: at once) and print their lines once
all have ended, with "burst" the burst's number (1 for the first), before it
calls in its loop again.
Requests and replies are raw protobuf bytes (no serializers), encoded and
decoded by hand below. It exits when its stdin ends (the parent test is
gone) or on SIGTERM/SIGINT.
"""

import json
import queue
import signal
import sys
import threading
import time

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

    bursts = queue.Queue()  # the (N, GAP) of each "burst N GAP" not yet made

    def read_commands():
        for text in sys.stdin:  # ends at EOF: the parent is gone
            words = text.split()
            if (len(words) == 3 and words[0] == "burst" and words[1].isdigit()
                    and int(words[1]) > 0 and words[2].isdigit()):
                bursts.put((int(words[1]), int(words[2]) / 1000))
            else:
                sys.stderr.write("client.py: %r is not burst N GAP\n" % text)
        stop.set()

    threading.Thread(target=read_commands, daemon=True).start()

    def metadata(n):
        return [(k, v.replace("{n}", str(n))) for k, v in pairs] or None

    def line_of(n, t0, reply=None, err=None):
        ms = round((time.monotonic() - t0) * 1000, 3)
        if err is None:
            return {"n": n, "ok": True, "by": served_by(reply), "ms": ms}
        return {"n": n, "ok": False, "code": err.code().value[0],
                "error": err.details(), "ms": ms}

    def write(line):
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    with grpc.insecure_channel(target) as channel:
        # No serializers: the request and the reply are bytes as they are.
        call = channel.unary_unary(METHOD)
        n, burst = 0, 0
        while not stop.is_set():
            n += 1
            t0 = time.monotonic()
            try:
                line = line_of(n, t0, reply=call(REQUEST, timeout=2, metadata=metadata(n)))
            except grpc.RpcError as err:
                line = line_of(n, t0, err=err)
            write(line)
            try:
                k, gap = bursts.get_nowait()
            except queue.Empty:
                stop.wait(interval)
                continue
            burst += 1
            lines, done = [], threading.Event()
            lock = threading.Lock()

            def ended(fut, n, t0):
                try:
                    line = line_of(n, t0, reply=fut.result())
                except grpc.RpcError as err:
                    line = line_of(n, t0, err=err)
                line["burst"] = burst
                with lock:
                    lines.append(line)
                    if len(lines) == k:
                        done.set()

            for i in range(k):
                if i > 0:
                    time.sleep(gap)
                n += 1
                t0 = time.monotonic()
                fut = call.future(REQUEST, timeout=2, metadata=metadata(n))
                fut.add_done_callback(lambda f, n=n, t0=t0: ended(f, n, t0))
            done.wait()
            for line in lines:
                write(line)


if __name__ == "__main__":
    main()
