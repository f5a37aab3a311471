// Node.js HTTP over one keep-alive connection (tests/rdma-programs/cases/node.sh).
//   node node_http.js server HOST PORT FILE    serves FILE's bytes for every GET
//   node node_http.js client HOST PORT N       N GETs on one keep-alive socket
// The client prints one line: responses, bytes, the distinct sha256 of the
// bodies (one when all are equal), the distinct local ports (sockets) used,
// and the total and mean time per request/response in ms.
'use strict';
const http = require('http');
const crypto = require('crypto');
const fs = require('fs');
const [mode, host, portArg, arg] = process.argv.slice(2);
const port = parseInt(portArg, 10);

if (mode === 'server') {
  const body = fs.readFileSync(arg);
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, {'Content-Length': body.length, 'Content-Type': 'application/octet-stream'});
      res.end(body);
    });
  });
  srv.keepAliveTimeout = 60000;
  srv.listen(port, host);
  // Exit normally on SIGTERM so that XPRESS_STATS=json is written.
  process.on('SIGTERM', () => process.exit(0));
} else if (mode === 'client') {
  const n = parseInt(arg, 10);
  const agent = new http.Agent({keepAlive: true, maxSockets: 1});
  const sums = new Set();
  const sockets = new Set();
  let done = 0;
  let bytes = 0;
  const t0 = process.hrtime.bigint();
  const one = () => {
    const req = http.get({host, port, path: '/' + done, agent}, (res) => {
      const h = crypto.createHash('sha256');
      sockets.add(res.socket.localPort);
      res.on('data', (c) => {
        h.update(c);
        bytes += c.length;
      });
      res.on('end', () => {
        sums.add(h.digest('hex'));
        if (++done < n) return one();
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        console.log(`responses ${done} bytes ${bytes} sha256 ${[...sums].join(',')} sockets ${sockets.size} ` +
                    `ms ${ms.toFixed(0)} per_response_ms ${(ms / done).toFixed(1)}`);
        agent.destroy();
      });
    });
    req.on('error', (e) => {
      console.error(`request ${done}: ${e.message}`);
      process.exit(1);
    });
  };
  one();
} else {
  console.error('usage: node_http.js server HOST PORT FILE | client HOST PORT N');
  process.exit(2);
}
