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
// Each line also gives the call's duration in milliseconds, measured here
// ("ms"). A line "burst N GAP" on stdin makes it, after its current call,
// start N calls GAP milliseconds apart (0: at once, in one turn of the
// event loop) and print their lines once all have ended, with "burst" the
// burst's number (1 for the first), before it calls in its loop again.
// It needs no proto-loader: requests and replies are raw protobuf bytes,
// encoded and decoded by hand below. It exits when its stdin ends (the
// parent test is gone) or on SIGTERM/SIGINT.
'use strict';

const path = require('path');
const readline = require('readline');
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
process.stdin.on('error', stop);
const bursts = []; // the [N, GAP] of each "burst N GAP" not yet made
const commands = readline.createInterface({ input: process.stdin });
commands.on('close', stop);
commands.on('line', (text) => {
  const m = /^burst (\d+) (\d+)$/.exec(text.trim());
  if (!m || Number(m[1]) < 1) {
    process.stderr.write('client.js: ' + JSON.stringify(text) + ' is not burst N GAP\n');
    return;
  }
  bursts.push([Number(m[1]), Number(m[2])]);
});

// call makes call number id and hands its line to done.
function call(id, done) {
  const md = new grpc.Metadata();
  for (const [k, v] of pairs) md.add(k, v.split('{n}').join(String(id)));
  const t0 = performance.now();
  client.makeUnaryRequest(method, (b) => b, (b) => b, request, md,
    { deadline: Date.now() + 2000 }, (err, reply) => {
      const ms = Math.round((performance.now() - t0) * 1000) / 1000;
      if (err) {
        done({ n: id, ok: false, code: err.code, error: err.details || err.message, ms: ms });
      } else {
        done({ n: id, ok: true, by: servedBy(reply), ms: ms });
      }
    });
}

let burst = 0;

// burstOnce starts k calls gap ms apart, prints their lines once all have
// ended, then goes on with the loop.
function burstOnce(k, gap) {
  burst++;
  const lines = [];
  const start = () => {
    n++;
    call(n, (line) => {
      line.burst = burst;
      lines.push(line);
      if (lines.length === k) {
        for (const l of lines) process.stdout.write(JSON.stringify(l) + '\n');
        setTimeout(callOnce, intervalMs);
      }
    });
  };
  if (gap === 0) {
    for (let i = 0; i < k; i++) start();
    return;
  }
  let started = 0;
  const next = () => {
    start();
    if (++started < k) setTimeout(next, gap);
  };
  next();
}

function callOnce() {
  if (stopping) return;
  if (bursts.length > 0) {
    burstOnce(...bursts.shift());
    return;
  }
  n++;
  call(n, (line) => {
    process.stdout.write(JSON.stringify(line) + '\n');
    setTimeout(callOnce, intervalMs);
  });
}

callOnce();
