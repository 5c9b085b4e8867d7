#!/usr/bin/env node
// A gRPC client in Node.js that finds its servers through xDS, as any
// non-Go client of Muster's control plane would: @grpc/grpc-js with
// @grpc/grpc-js-xds, no Muster code.
//
// Usage: node client.js [target] [interval-ms] [name=value ...]
//   target       default xds:///greeter
//   interval-ms  pause between two calls, default 5
//   name=value   metadata sent on every call (e.g. x-muster-color=blue);
//                "{n}" in a value is replaced by the call's number
//
// The bootstrap comes from GRPC_XDS_BOOTSTRAP (a file) or
// GRPC_XDS_BOOTSTRAP_CONFIG (the JSON itself), read by @grpc/grpc-js-xds.
// The packages are those of this directory, or of the directory named by
// XDS_CLIENT_PACKAGES (another pinned version, e.g. ../nodeclient-floor).
//
// It calls muster.demo.greeter.v1.Greeter/SayHello in a loop, one call at a
// time, and prints one JSON line per call on stdout:
//   {"n":1,"ok":true,"by":"127.0.0.1:40001"}       served_by of the reply
//   {"n":2,"ok":false,"code":14,"error":"..."}     a failed call
// It needs no proto-loader: requests and replies are raw protobuf bytes,
// encoded and decoded by hand below. It exits when its stdin ends (the
// parent test is gone) or on SIGTERM/SIGINT.
'use strict';

const path = require('path');
const { createRequire } = require('module');

const packages = process.env.XDS_CLIENT_PACKAGES || __dirname;
const load = createRequire(path.join(path.resolve(packages), 'package.json'));
const grpc = load('@grpc/grpc-js');
const grpcXds = load('@grpc/grpc-js-xds');

const target = process.argv[2] || 'xds:///greeter';
const intervalMs = Number(process.argv[3] || 5);
const pairs = process.argv.slice(4).map((kv) => {
  const i = kv.indexOf('=');
  if (i <= 0) {
    process.stderr.write('client.js: ' + JSON.stringify(kv) + ' is not name=value\n');
    process.exit(2);
  }
  return [kv.slice(0, i), kv.slice(i + 1)];
});
const method = '/muster.demo.greeter.v1.Greeter/SayHello';

grpcXds.register();

// HelloRequest{name: "node"}: field 1, length-delimited.
const request = Buffer.concat([Buffer.from([0x0a, 4]), Buffer.from('node')]);

function readVarint(buf, pos) {
  let v = 0;
  let shift = 0;
  for (;;) {
    if (pos >= buf.length) throw new Error('truncated varint');
    const b = buf[pos++];
    v += (b & 0x7f) * 2 ** shift;
    if ((b & 0x80) === 0) return [v, pos];
    shift += 7;
  }
}

// servedBy returns field 2 (served_by) of a serialized HelloReply.
function servedBy(buf) {
  let pos = 0;
  while (pos < buf.length) {
    let tag;
    [tag, pos] = readVarint(buf, pos);
    const field = Math.floor(tag / 8);
    const wire = tag % 8;
    if (wire === 0) {
      [, pos] = readVarint(buf, pos);
    } else if (wire === 2) {
      let len;
      [len, pos] = readVarint(buf, pos);
      if (field === 2) return buf.subarray(pos, pos + len).toString('utf8');
      pos += len;
    } else if (wire === 1) {
      pos += 8;
    } else if (wire === 5) {
      pos += 4;
    } else {
      throw new Error('unexpected wire type ' + wire);
    }
  }
  return '';
}

const client = new grpc.Client(target, grpc.credentials.createInsecure());
let stopping = false;
let n = 0;

function stop() {
  stopping = true;
  client.close();
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.on('error', stop);
process.stdin.resume();

function callOnce() {
  if (stopping) return;
  n++;
  const id = n;
  const md = new grpc.Metadata();
  for (const [k, v] of pairs) md.add(k, v.split('{n}').join(String(id)));
  client.makeUnaryRequest(method, (b) => b, (b) => b, request, md,
    { deadline: Date.now() + 2000 }, (err, reply) => {
      let line;
      if (err) {
        line = { n: id, ok: false, code: err.code, error: err.details || err.message };
      } else {
        line = { n: id, ok: true, by: servedBy(reply) };
      }
      process.stdout.write(JSON.stringify(line) + '\n');
      setTimeout(callOnce, intervalMs);
    });
}

callOnce();
